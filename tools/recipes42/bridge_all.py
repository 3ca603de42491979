import json, sys, subprocess, os
from plan_all import S, build, val, layout_str
PRESET = {'bf16': 'bf16_mixed', 'fp8-current': 'bf16_with_fp8_current_scaling_mixed', 'fp8': 'bf16_with_fp8_delayed_scaling_mixed',
          'mxfp8': 'bf16_with_mxfp8_mixed', 'nvfp4': 'bf16_with_nvfp4_mixed'}
import re
def expand(lay):
    lay = lay.replace(',', '')
    while '(' in lay:
        lay = re.sub(r'\(([^()]*)\)\*(\d+)', lambda m: m.group(1) * int(m.group(2)), lay)
    return re.sub(r'([EtmL])\*(\d+)', lambda m: m.group(1) * int(m.group(2)), lay)
def overrides(args):
    a = dict(); flags = set(); i = 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith('--'): a[args[i]] = args[i + 1]; i += 2
        else: flags.add(args[i]); i += 1
    o = []
    m = {'--tp': 'model.tensor_model_parallel_size', '--pp': 'model.pipeline_model_parallel_size',
         '--vp': 'model.virtual_pipeline_model_parallel_size', '--cp': 'model.context_parallel_size',
         '--ep': 'model.expert_model_parallel_size', '--etp': 'model.expert_tensor_parallel_size',
         '--micro-batch': 'train.micro_batch_size', '--global-batch': 'train.global_batch_size', '--seq': 'model.seq_length',
         '--first-stage-layers': 'model.num_layers_in_first_pipeline_stage', '--last-stage-layers': 'model.num_layers_in_last_pipeline_stage',
         '--cpu-offloading-num-layers': 'model.cpu_offloading_num_layers'}
    for f, k in m.items():
        if f in a: o.append(f'{k}={a[f]}')
    if '--pipeline-layout' in a:
        o.append(f'model.pipeline_model_parallel_layout="{expand(a["--pipeline-layout"])}"')
    o += ['ddp.use_distributed_optimizer=True', 'optimizer.use_distributed_optimizer=True']
    o.append(f'mixed_precision={PRESET[a["--precision"]]}')
    if a['--precision'] in ('fp8-current', 'fp8') and '--bf16-layers-at-end' not in a:
        o.append('mixed_precision.first_last_layers_bf16=False')  # perf_recipes/_common.py:112,115
    if a.get('--grad-bytes') == '2': o.append('mixed_precision.grad_reduce_in_fp32=False')
    if '--no-sequence-parallel' in flags: o.append('model.sequence_parallel=False')
    elif a.get('--tp', '1') != '1': o.append('model.sequence_parallel=True')
    rc = a['--recompute']
    if rc == 'none': o.append('model.recompute_granularity=null')
    elif rc == 'full':
        o.append('model.recompute_granularity=full')
        if '--recompute-layers' in a: o += ['model.recompute_method=block', f'model.recompute_num_layers={a["--recompute-layers"]}']
        else: o += ['model.recompute_method=uniform', 'model.recompute_num_layers=1']
    else: o += ['model.recompute_granularity=selective', f'model.recompute_modules=[{rc}]']
    if '--account-for-embedding-in-pipeline-split' in flags: o.append('model.account_for_embedding_in_pipeline_split=True')
    if '--account-for-loss-in-pipeline-split' in flags: o.append('model.account_for_loss_in_pipeline_split=True')
    if '--mtp' in flags: o.append('model.mtp_num_layers=1')
    if '--cuda-graph-scope' in a: o += ['model.cuda_graph_impl=transformer_engine', f'model.cuda_graph_scope=[{a["--cuda-graph-scope"]}]']
    if '--deepep' in flags:
        o += ['model.moe_token_dispatcher_type=flex', 'model.moe_flex_dispatcher_backend=' + ('hybridep' if '--hybridep' in flags else 'deepep')]
    elif '--ep' in a: o.append('model.moe_token_dispatcher_type=alltoall')
    if '--overlap-a2a' in flags: o.append('++comm_overlap.overlap_moe_expert_parallel_comm=True')
    if '--delay-wgrad-compute' in flags: o.append('++comm_overlap.delay_wgrad_compute=True')
    if '--tp-comm-overlap' in flags: o.append('++comm_overlap.tp_comm_overlap=True')
    if '--cpu-offloading-num-layers' in a: o.append('model.cpu_offloading=True')
    if '--fsdp' in flags: o += ['checkpoint.ckpt_format=fsdp_dtensor', 'ddp.use_megatron_fsdp=True', 'ddp.data_parallel_sharding_strategy=optim_grads_params']
    if a.get('--optimizer-moments') == 'bf16':
        o += ['optimizer.use_precision_aware_optimizer=True', 'optimizer.exp_avg_dtype=bf16', 'optimizer.exp_avg_sq_dtype=bf16']
    elif '--precision-aware-optimizer' in flags: o.append('optimizer.use_precision_aware_optimizer=True')
    if a['--precision'] == 'nvfp4':  # the preset's own fp4_param_gather True (mixed_precision.py L416) unless the recipe's off
        o.append('mixed_precision.fp4_param_gather=' + ('True' if '--fp8-param-gather' in flags else 'False'))
    elif a['--precision'] != 'bf16':
        o.append('mixed_precision.fp8_param_gather=' + ('True' if '--fp8-param-gather' in flags else 'False'))
    if '--fp8-attention' in flags: o.append('mixed_precision.fp8_dot_product_attention=True')
    if a.get('--loss') == 'te_fused': o += ['model.cross_entropy_loss_fusion=True', 'model.cross_entropy_fusion_impl=te']
    if a.get('--optimizer') == 'sgd': o.append('optimizer.optimizer=sgd')
    if '--overlap-grad-reduce' in flags: o.append('ddp.overlap_grad_reduce=True')
    if '--overlap-param-gather' in flags: o.append('ddp.overlap_param_gather=True')
    if '--bf16-layers-at-end' in a: o += ['mixed_precision.first_last_layers_bf16=True', f'mixed_precision.num_layers_at_end_in_bf16={a["--bf16-layers-at-end"]}']
    return o
if __name__ == '__main__':
    rows = json.load(open(sys.argv[1])); os.makedirs('bridge', exist_ok=True)
    for name, r in rows.items():
        if r.get('rc') != 0: continue
        ov = overrides(r['args']) + (['model.moe_shared_expert_overlap=False'] if r.get('seov') is False else [])
        for k, key in (('acce', 'embedding'), ('accl', 'loss')):  # as the recipe sets them, PP 1 included
            line = f'model.account_for_{key}_in_pipeline_split=True'
            if r.get(k) and line not in ov:
                ov.append(line)
        path = f'bridge/{name}.overrides'
        open(path, 'w').write('\n'.join(ov) + '\n')
        args = ['--model', r['model'], '--hw', r['hw'], '-n', str(r['n']), '--from-bridge', path]
        p = subprocess.run([sys.executable, '-m', 'btacalc', 'plan', *args, '--json'], capture_output=True, text=True)
        res = dict(rc=p.returncode, err=p.stderr.strip().splitlines()[-1] if p.stderr.strip() else '')
        if p.returncode in (0, 1):
            d = json.loads(p.stdout); res.update(tps_ok=1, fits=d['plan']['fits'], mem_gib=d['memory_bytes']['total'] / 2**30,
                                                 tps=(d['throughput'] or {}).get('tokens_per_s'))
        r['bridge'] = dict(args=args, overrides=ov, **res)
        print(name, res['rc'], res.get('fits'), round(res.get('mem_gib', 0), 1), round(res.get('tps') or 0), round(r['tps'] or 0), res['err'][:150], flush=True)
    json.dump(rows, open(sys.argv[2], 'w'), indent=1)
