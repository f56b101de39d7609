# Counts, over the last 60 % of a `perf script -F tid,time,ip,sym,dso`
# output (the steady steps), the samples whose innermost frame is the
# per-step weight packing: amx::Forward3x3::set_weights (inlined into
# Conv2d::forward_bf16_mapped), onednn::FlippedWeights::update (inlined into
# Conv2d::run_backward's lambda before the change), by thread (main: the
# lowest thread id).
import collections, re, sys

samples, cur = [], None
for line in open(sys.argv[1]):
    if not line.strip():
        if cur:
            samples.append(cur)
        cur = None
        continue
    if not line[0].isspace():
        m = re.match(r'\s*(\d+)\s+([\d.]+):', line)
        if m:
            cur = (int(m.group(1)), float(m.group(2)), [])
        continue
    if cur is not None:
        cur[2].append(line.strip())
t0 = min(s[1] for s in samples)
t1 = max(s[1] for s in samples)
steady = [s for s in samples if s[1] >= t0 + 0.4 * (t1 - t0)]
main = min(s[0] for s in steady)
count = collections.Counter()
for tid, _, frames in steady:
    if not frames:
        continue
    leaf = frames[0]
    if 'forward_bf16_mapped' in leaf or 'set_weights' in leaf:
        what = 'set_weights'
    elif 'FlippedWeights' in leaf or 'run_backward' in leaf:
        what = 'flipped weights (run_backward)'
    else:
        continue
    count[('main' if tid == main else 'worker', what)] += 1
print(f'steady samples {len(steady)}; packing samples by thread:', dict(sorted(count.items())))
