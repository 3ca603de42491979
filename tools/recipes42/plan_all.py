import json, re, subprocess, sys, os
S = json.load(open('summary.json'))
MODELS = [('llama31_405b','llama-3.1-405b'),('llama3_70b','llama-3-70b'),('llama3_8b','llama-3-8b'),
          ('qwen3_30b_a3b','qwen3-30b-a3b'),('qwen3_235b_a22b','qwen3-235b-a22b'),('deepseek_v3','deepseek-v3'),
          ('kimi_k2','kimi-k2'),('gpt_oss_120b','gpt-oss-120b'),('gpt_oss_20b','gpt-oss-20b')]
UNMODELLED = [('nemotron','Nemotron-H / Nemotron 3 (hybrid Mamba-2 + attention + MoE): no Mamba layer in btacalc'),
  ('qwen3_next','Qwen3-Next (Gated DeltaNet linear attention + gated attention hybrid): not modelled'),
  ('qwen3_vl','Qwen3-VL (vision encoder + language MoE): vision models not modelled'),
  ('qwen35_vl','Qwen3.5-VL (vision encoder, Gated DeltaNet hybrid): not modelled'),
  ('glm5','GLM-5 (DeepSeek sparse attention, DSA indexer): not modelled'),
  ('deepseek_v4','DeepSeek-V4 (compressed sparse attention, hyper-connections): not modelled'),
  ('wan_','Wan 2.x (video diffusion transformer): not modelled')]
PREC = {'bf16_mixed':'bf16','bf16_with_fp8_current_scaling_mixed':'fp8-current','bf16_with_fp8_delayed_scaling_mixed':'fp8',
        'bf16_with_mxfp8_mixed':'mxfp8','bf16_with_nvfp4_mixed':'nvfp4'}
def val(r, k, d=None):
    v = r.get(k)
    return d if v is None else v[0]
def held_back(name, r, model, hw):
    tp, pp, vp, cp, ep = (val(r,k,1) or 1 for k in ('tp','pp','vp','cp','ep'))
    if model == 'qwen3-235b-a22b' and hw == 'gb200' and (pp, vp, ep) == (8, 3, 32): return 'qwen3-235b-a22b gb200 PP8 VP3 EP32'
    if model == 'gpt-oss-120b' and hw == 'b200' and ep == 8 and pp == 1: return 'gpt-oss-120b b200 EP8'
    if model == 'gpt-oss-120b' and hw == 'h100' and (pp, ep) == (4, 8): return 'gpt-oss-120b h100 PP4 EP8'
    if model == 'gpt-oss-120b' and hw == 'gb200' and ep == 64 and pp == 1: return 'gpt-oss-120b gb200 EP64'
    if model == 'deepseek-v3' and hw == 'gb200' and (pp, vp, ep) == (4, 4, 64): return 'deepseek-v3 gb200 PP4 VP4 EP64'
    if model == 'deepseek-v3' and hw == 'h100' and (tp, pp, ep) == (2, 8, 64):
        return f'deepseek-v3 h100 TP2 PP8 EP64 (here with VP{vp}: the listed layout plus interleaving, skipped as the same run)'
    if model == 'kimi-k2' and hw == 'h100' and (pp, vp, ep) == (8, 4, 32): return 'kimi-k2 h100 PP8 VP4 EP32'
    if model == 'llama-3.1-405b' and hw == 'gb200' and (tp, pp, vp, cp) == (4, 8, 8, 2): return 'llama-3.1-405b gb200 TP4 PP8 VP8 CP2'
    if model == 'llama-3.1-405b' and hw == 'h100' and (tp, pp, vp, cp) == (8, 8, 8, 2): return 'llama-3.1-405b h100 TP8 PP8 VP8 CP2'
    if model == 'gpt-oss-20b' and hw == 'h100': return 'gpt-oss-20b h100'
    return None
def layout_str(lay):
    if isinstance(lay, str): return lay
    m = {'embedding':'E','decoder':'t','mtp':'m','loss':'L'}
    return '|'.join(''.join(m[x] for x in st) for st in lay)
def build(name, r):
    hw = re.search(r'_(h100|b200|gb200)_', name).group(1)
    n = int(re.search(r'_(\d+)gpu_', name).group(1))
    model = next((m for p, m in MODELS if name.startswith(p)), None)
    notes = []
    if model is None:
        return dict(hw=hw, n=n, model=None, skip=next(w for p, w in UNMODELLED if p in name))
    hb = held_back(name, r, model, hw)
    if hb: return dict(hw=hw, n=n, model=model, skip='held back: ' + hb)
    if val(r, 'peft'):
        return dict(hw=hw, n=n, model=model, skip='LoRA fine-tuning (peft.target_modules): frozen base weights not modelled')
    a = ['--model', model, '--hw', hw, '-n', str(n)]
    for k, f in (('tp','--tp'),('pp','--pp'),('vp','--vp'),('cp','--cp'),('ep','--ep'),('etp','--etp')):
        v = val(r, k)
        if v is not None and not (k == 'etp' and val(r, 'ep', 1) in (None,)):
            a += [f, str(v)]
    a += ['--micro-batch', str(val(r,'mbs')), '--global-batch', str(val(r,'gbs')), '--seq', str(val(r,'seq'))]
    prec = val(r, 'prec'); pn = prec.strip('<>').split('(')[0]
    if pn not in PREC:
        notes.append(f'precision {pn} mapped to nvfp4'); pn = 'bf16_with_nvfp4_mixed'
    a += ['--precision', PREC[pn]]
    if val(r, 'sp') is False and val(r,'tp',1) > 1: a += ['--no-sequence-parallel']
    rg = val(r, 'rg')
    if rg is None: a += ['--recompute', 'none']
    elif rg == 'selective':
        mods = val(r, 'rmods') or ['core_attn']
        a += ['--recompute', ','.join(mods)] if mods else ['--recompute', 'none']
    elif rg == 'full':
        a += ['--recompute', 'full']
        if val(r, 'rm') == 'block': a += ['--recompute-layers', str(val(r, 'rn'))]
    lay = val(r, 'layout')
    if lay: a += ['--pipeline-layout', layout_str(lay)]
    else:
        # at PP 1 the account-for flags have no effect (Megatron-Core builds the same L layers): btacalc's readers
        # drop them with a note and the plan options refuse them (tests/test_account_for_pp1.py), so left out here
        if val(r, 'acce') and (val(r, 'pp') or 1) > 1: a += ['--account-for-embedding-in-pipeline-split']
        if val(r, 'accl') and (val(r, 'pp') or 1) > 1: a += ['--account-for-loss-in-pipeline-split']
        if val(r, 'first'): a += ['--first-stage-layers', str(val(r,'first'))]
        if val(r, 'last'): a += ['--last-stage-layers', str(val(r,'last'))]
    if val(r, 'mtp') and model == 'deepseek-v3': a += ['--mtp']
    cgi, cgs = val(r, 'cgi'), val(r, 'cgs') or []
    if isinstance(cgs, str): cgs = [cgs]
    if cgi == 'transformer_engine' and (not cgs or 'full' in cgs):
        notes.append('whole-layer CUDA graph (cuda_graph_impl=transformer_engine, no scope): btacalc models per-layer scopes only; planned without')
    elif cgi == 'transformer_engine' and cgs and 'full_iteration' not in cgs:
        a += ['--cuda-graph-scope', ','.join(cgs)]
    elif cgi in ('local', 'full_iteration') or 'full_iteration' in cgs:
        notes.append('full-iteration CUDA graph (cuda_graph_impl=%s): not modelled' % cgi)
    disp, flex = val(r, 'disp'), val(r, 'flex')
    if disp == 'flex':
        a += ['--deepep'] + (['--hybridep'] if flex == 'hybridep' else [])
    elif disp == 'allgather': a += ['--allgather-dispatcher']
    if val(r, 'epov'): a += ['--overlap-a2a']
    if val(r, 'dwg') and val(r, 'epov'): a += ['--delay-wgrad-compute']
    if val(r, 'off') and val(r, 'offn'): a += ['--cpu-offloading-num-layers', str(val(r, 'offn'))]
    if val(r, 'fsdp'): a += ['--fsdp']
    if val(r, 'pao'):
        a += ['--optimizer-moments', 'bf16'] if val(r, 'mom') == 'bfloat16' else ['--precision-aware-optimizer']
    # Bridge's FP8 / MXFP8 presets set fp8_param_gather True, NVFP4's fp4_param_gather True (training/mixed_precision.py
    # L231, L264, L302, L416 @ 067f987d); the perf recipes keep it unless they set it off
    key = 'f4pg' if PREC[pn] == 'nvfp4' else 'fpg'
    if PREC[pn] != 'bf16' and (r.get(key) is None or val(r, key)):
        a += ['--fp8-param-gather']
    if val(r, 'fp8dpa'): a += ['--fp8-attention']
    if val(r, 'grf32') is False: a += ['--grad-bytes', '2']
    if val(r, 'celf') and val(r, 'cefi') == 'te': a += ['--loss', 'te_fused']
    if val(r, 'fll'):
        if val(r, 'bf16s'): a += ['--bf16-layers-at-start', str(val(r, 'bf16s'))]
        if val(r, 'bf16e'): a += ['--bf16-layers-at-end', str(val(r, 'bf16e'))]
    if model == 'kimi-k2':
        # recipes/kimi/h100/kimi_k2.py L78-85: optimizer dist_muon (Muon, layer-wise distributed; Adam for the rest)
        a += ['--optimizer', 'sgd']
        notes.append('Muon optimizer (dist_muon): not modelled; planned with --optimizer sgd, the same state '
                     '(fp32 master weights and one momentum)')
    if val(r, 'ogr'): a += ['--overlap-grad-reduce']
    if val(r, 'opg'): a += ['--overlap-param-gather']
    if val(r, 'tpov') or val(r, 'co.tp_comm_overlap') == 'True':
        if val(r,'tp',1) > 1: a += ['--tp-comm-overlap']
    if val(r, 'stash'): notes.append('moe_paged_stash with moe_expert_rank_capacity_factor %s: not modelled' % val(r, 'rcap'))
    elif val(r, 'rcap'): notes.append('moe_expert_rank_capacity_factor %s: not modelled' % val(r, 'rcap'))
    if val(r, 'fgo') and val(r, 'offmods'): notes.append('fine-grained activation offloading of %s: not modelled' % val(r, 'offmods'))
    return dict(hw=hw, n=n, model=model, args=a, notes=notes, seov=val(r, 'seov'),
                acce=bool(val(r, 'acce')), accl=bool(val(r, 'accl')))
def run(args):
    p = subprocess.run([sys.executable, '-m', 'btacalc', 'plan', *args, '--json'], capture_output=True, text=True,
                       env={**os.environ, 'PYTHONPATH': os.environ.get('WT', '/work/wt-recipes42')}, cwd='/tmp/recipes42')
    out = dict(rc=p.returncode, err=p.stderr.strip().splitlines()[-1] if p.stderr.strip() else '')
    if p.returncode in (0, 1) and p.stdout.strip():
        d = json.loads(p.stdout)
        mb = d['memory_bytes']
        out.update(fits=d['plan']['fits'], mem_gib=mb['total']/2**30, usable_gib=mb['usable_capacity']/2**30,
                   tps=d['throughput']['tokens_per_s'] if d['plan']['fits'] else None)
    return out
if __name__ == '__main__':
    rows = {}
    for name, r in S.items():
        b = build(name.replace('_config',''), r)
        if 'args' in b: b.update(run(b['args']))
        rows[name] = b
        print(name, b.get('skip') or (b['rc'], b.get('fits'), round(b.get('mem_gib',0),1), round(b.get('usable_gib',0),1), b.get('err','')[:200]), flush=True)
    json.dump(rows, open(sys.argv[1] if len(sys.argv) > 1 else 'rows.json', 'w'), indent=1)
