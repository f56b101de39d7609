# oneDNN's primitives in one bf16 ResNet-56 step on one and on two threads,
# from DNNL_VERBOSE=1 (the last two timed steps' 296 exec lines of each):
#   OMP_NUM_THREADS=1|2 DNNL_VERBOSE=1 build/bench/cifarnet_bench --only resnet56 --formats nhwc \
#     --precision bf16 --reps 1 --steps 2 --warmup 2 --profile 0 > /tmp/dnnlv_t1.txt / _t2.txt
# Prints ms per step of each primitive kind and shape, and its excess on two
# threads (ms at 2 threads minus half the ms at 1).
import collections
def load(f):
    L = [l.strip().split(',') for l in open(f) if l.startswith('onednn_verbose,exec')]
    L = L[-296:]
    d = collections.OrderedDict()
    for p in L:
        key = (p[3], p[4], p[5], p[6][:90], p[9])
        d.setdefault(key, []).append(float(p[-1]))
    return d
a = load('/tmp/dnnlv_t1.txt'); b = load('/tmp/dnnlv_t2.txt')
tot1 = sum(sum(v) for v in a.values()) / 2; tot2 = sum(sum(v) for v in b.values()) / 2
print('per step ms: 1t %.2f 2t %.2f' % (tot1, tot2))
rows = []
for k in a:
    if k in b:
        s1 = sum(a[k]) / 2; s2 = sum(b[k]) / 2
        rows.append((s2 - s1 / 2, s1, s2, len(a[k]) // 2, k))
rows.sort(reverse=True)
for r in rows[:25]: print('%6.3f 1t %6.3f 2t %6.3f x%d %s' % (r[0], r[1], r[2], r[3], ' | '.join(r[4])))
