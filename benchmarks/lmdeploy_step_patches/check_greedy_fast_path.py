"""The greedy fast path of greedy-rejection-fast-path.diff against LMDeploy 0.18.0's own path (sampling inputs
expanded to k+1 rows, then FusedLogitsProcessor, then argmax), on random CPU tensors: the target token ids must
match in every case. Runs with torch alone; LMDeploy's two files are read from an unpacked 0.18.0 tree.

    python benchmarks/lmdeploy_step_patches/check_greedy_fast_path.py SITE   # SITE/lmdeploy/pytorch/...
"""

import asyncio, sys, types, re
ROOT = sys.argv[1] if len(sys.argv) > 1 else '.'
import torch
# stub the imports logits_process.py needs
for name in ['lmdeploy', 'lmdeploy.messages', 'lmdeploy.pytorch', 'lmdeploy.pytorch.envs', 'lmdeploy.pytorch.messages',
             'lmdeploy.pytorch.engine', 'lmdeploy.pytorch.engine.guided_process']:
    sys.modules[name] = types.ModuleType(name)
sys.modules['lmdeploy.messages'].LogitsProcessor = object
sys.modules['lmdeploy.pytorch'].envs = sys.modules['lmdeploy.pytorch.envs']
sys.modules['lmdeploy.pytorch.envs'].repetition_window_size = 1024
sys.modules['lmdeploy.pytorch.messages'].SchedulerSequence = object
sys.modules['lmdeploy.pytorch.engine.guided_process'].GuidedDecodingManager = object
src = open(ROOT + '/lmdeploy/pytorch/engine/logits_process.py').read()
src = src.replace('from ..messages import', 'from lmdeploy.pytorch.messages import').replace('from .guided_process import', 'from lmdeploy.pytorch.engine.guided_process import')
lp = {'__name__': 'lp'}; exec(compile(src, 'logits_process.py', 'exec'), lp)
sa = open(ROOT + '/lmdeploy/pytorch/spec_decode/spec_agent.py').read()
fn = sa[sa.index('_SCALAR_FIELDS = '):sa.index('class SpecModelAgent')]
ns = dict(lp); ns['np'] = __import__('numpy'); exec(fn, ns)
SamplingInputs, Fused, expand, pbw = lp['SamplingInputs'], lp['FusedLogitsProcessor'], ns['_expand_sampling_inputs'], lp['_process_bad_words_']

def fast(si, logits, B, n):   # the patched code path, verbatim
    scores = logits
    if si.bad_words is not None:
        scores = pbw(scores, si.bad_words.repeat_interleave(n, 0), si.bad_mask.repeat_interleave(n, 0))
    if si.stop_words is not None:
        stop_mask = torch.where((si.num_ignore_eos > 0)[:, None], si.stop_mask, False)
        scores = pbw(scores, si.stop_words.repeat_interleave(n, 0), stop_mask.repeat_interleave(n, 0))
    return scores.view(B, n, -1).argmax(dim=-1)

async def orig(si, logits, B, n):
    e = expand(si, n)
    scores, _ = await Fused(e)(logits)
    return scores.view(B, n, -1).argmax(dim=-1)

torch.manual_seed(0); bad = 0
for trial in range(300):
    B = int(torch.randint(1, 5, ())); n = int(torch.randint(2, 17, ())); V = 64
    logits = torch.randn(B * n, V)
    # make the banned ids the likely argmax so masking matters
    bw = torch.randint(0, V, (B, 3)); bmask = torch.rand(B, 3) > 0.3
    sw = torch.randint(0, V, (B, 2)); smask = torch.rand(B, 2) > 0.2
    for b in range(B):
        logits.view(B, n, V)[b, :, bw[b, 0]] += 5; logits.view(B, n, V)[b, :, sw[b, 0]] += 4
    kind = trial % 4
    si = SamplingInputs(max_top_k=1, batch_size=B, max_num_logprobs=-1, logits_processors=[None] * B,
                        random_offsets=torch.arange(B), num_ignore_eos=torch.randint(-3, 3, (B,)))
    if kind in (1, 3): si.bad_words, si.bad_mask = bw.where(bmask, -1), bmask
    if kind in (2, 3): si.stop_words, si.stop_mask = sw.where(smask, -1), smask
    a = asyncio.run(orig(si, logits.clone(), B, n)); f = fast(si, logits.clone(), B, n)
    bad += int(not torch.equal(a, f))
print('mismatches:', bad, 'of 300')

import time
B, n, V = 1, 16, 8
si = SamplingInputs(max_top_k=1, batch_size=B, max_num_logprobs=-1, logits_processors=[None], random_offsets=torch.arange(B),
                    num_ignore_eos=torch.tensor([-5]), bad_words=torch.tensor([[7, 3]]), bad_mask=torch.tensor([[True, True]]))
logits = torch.randn(B * n, V)
async def bench():
    for name, f in (('orig (expand+FusedLogitsProcessor)', lambda: orig(si, logits, B, n)), ('fast', None)):
        for _ in range(200):
            if f: await f()
            else: fast(si, logits, B, n)
        t = time.perf_counter()
        for _ in range(2000):
            if f: await f()
            else: fast(si, logits, B, n)
        print(f'{name}: {(time.perf_counter() - t) / 2000 * 1e6:.0f} us/step on CPU tensors (host overhead only)')
asyncio.run(bench())
