import json, re
KEYS = {
 'model.tensor_model_parallel_size':'tp','model.pipeline_model_parallel_size':'pp','model.context_parallel_size':'cp',
 'model.virtual_pipeline_model_parallel_size':'vp','model.expert_model_parallel_size':'ep','model.expert_tensor_parallel_size':'etp',
 'model.pipeline_model_parallel_layout':'layout','model.sequence_parallel':'sp','train.global_batch_size':'gbs',
 'train.micro_batch_size':'mbs','model.seq_length':'seq','dataset.seq_length':'dseq','mixed_precision':'prec',
 'model.recompute_granularity':'rg','model.recompute_method':'rm','model.recompute_num_layers':'rn','model.recompute_modules':'rmods',
 'model.cuda_graph_impl':'cgi','model.cuda_graph_scope':'cgs','model.moe_token_dispatcher_type':'disp',
 'model.moe_flex_dispatcher_backend':'flex','model.moe_a2a_overlap':'a2aov','comm_overlap.overlap_moe_expert_parallel_comm':'epov',
 'comm_overlap.delay_wgrad_compute':'dwg','model.cpu_offloading':'off','model.cpu_offloading_num_layers':'offn',
 'model.num_layers_in_first_pipeline_stage':'first','model.num_layers_in_last_pipeline_stage':'last',
 'account_for_embedding_in_pipeline_split':'acce','account_for_loss_in_pipeline_split':'accl',
 'ddp.use_megatron_fsdp':'fsdp','optimizer.exp_avg_dtype':'mom','optimizer.use_precision_aware_optimizer':'pao',
 'fp8_param_gather':'fpg','fp4_param_gather':'f4pg','fp8_dot_product_attention':'fp8dpa','model.offload_modules':'offmods',
 'model.fine_grained_activation_offloading':'fgo','model.moe_paged_stash':'stash','model.moe_expert_rank_capacity_factor':'rcap',
 'model.mtp_num_layers':'mtp','peft.target_modules':'peft','model.freeze_language_model':'freeze',
 'num_layers_at_start_in_bf16':'bf16s','num_layers_at_end_in_bf16':'bf16e','first_last_layers_bf16':'fll',
 'comm_overlap.tp_comm_overlap':'tpov','comm_overlap':'co','model.moe_shared_expert_overlap':'seov',
 'ddp.grad_reduce_in_fp32':'grf32','optimizer.main_params_dtype':'mpd','optimizer.main_grads_dtype':'mgd',
 'model.moe_router_force_load_balancing':'flb','model.activation_offload_fraction':'aof','optimizer.offload_optimizer_states':'oos',
 'model.vocab_size':'vocab','tokenizer.vocab_size':'tvocab','ddp.data_parallel_sharding_strategy':'fsdpstrat','dist.use_megatron_fsdp':'fsdp2',
 'model.cpu_offloading_weights':'offw','model.cross_entropy_loss_fusion':'celf','model.cross_entropy_fusion_impl':'cefi','ddp.overlap_grad_reduce':'ogr','ddp.overlap_param_gather':'opg','model.moe_router_dtype':'rdt','model.moe_shared_expert_overlap':'seov','optimizer.exp_avg_sq_dtype':'mom2','model.apply_rope_fusion':'rope','ddp.nccl_ub':'ncclub','ddp.fp8_param_gather':'fpg','mixed_precision.fp8_param_gather':'fpg','mixed_precision.fp4_param_gather':'f4pg','mixed_precision.fp8_dot_product_attention':'fp8dpa','mixed_precision.first_last_layers_bf16':'fll','mixed_precision.num_layers_at_start_in_bf16':'bf16s','mixed_precision.num_layers_at_end_in_bf16':'bf16e', 'model.recompute_modules':'rmods',
}
def summarize(sets):
    out = {}
    for k, v, w in sets:
        root, _, rest = k.partition('.')
        # mixed-precision recorder roots: bf16_mixed.X etc
        if root.endswith('_mixed') and rest in ('fp8_param_gather','fp4_param_gather','fp8_dot_product_attention','first_last_layers_bf16','num_layers_at_start_in_bf16','num_layers_at_end_in_bf16'):
            key = rest
        elif root == 'CommOverlapConfig':
            key = 'comm_overlap.' + rest
        elif rest.startswith('to_megatron_provider().'):
            key = 'model.' + rest.split('.',1)[1]
        else:
            key = rest
        for kk, short in KEYS.items():
            if key == kk or key.endswith('.'+kk) and kk in ('account_for_embedding_in_pipeline_split','account_for_loss_in_pipeline_split'):
                out[short] = (v, w)
        if key == 'comm_overlap' and isinstance(v, str):
            for m in re.finditer(r'(\w+)=(\w+)', v):
                out['co.'+m.group(1)] = (m.group(2), w)
    out['base'] = (sets[0][0].split('.')[0] if sets else '?', '')
    roots = {k.split('.')[0] for k,_,_ in sets}
    out['base'] = ([r for r in roots if r.endswith('config') or 'config' in r] or ['?'], '')
    return out
if __name__ == '__main__':
    d = json.load(open('all.json'))
    res = {}
    for m, fs in d.items():
        for f, v in fs.items():
            res[f] = {'module': m, 'line': v['line'], **summarize(v['sets'])}
    json.dump(res, open('summary.json','w'), indent=0)
    for f, s in res.items():
        print(f, {k: v[0] for k, v in s.items() if k not in ('module','line') and isinstance(v, tuple)})
