# Pairs each perf sample of the worker thread inside libgomp (waiting at a
# barrier or for the next parallel region) with the main thread's nearest
# sample (within 0.3 ms), over the last 60 % of the run, and counts what the
# main thread was running then. Input: /tmp/perf.txt from
#   OMP_NUM_THREADS=2 perf record -g -o /tmp/perf.data build/bench/cifarnet_bench \
#     --only resnet56 --formats nhwc --precision bf16 --reps 5 --steps 4 --warmup 3 --profile 0
#   perf script -i /tmp/perf.data -F tid,time,ip,sym,dso > /tmp/perf.txt
# '[unknown]' frames are code perf could not name (oneDNN's JIT kernels among them).
import re,sys,collections,bisect
samples=[]  # (tid,time,frames)
cur=None
for line in open('/tmp/perf.txt'):
    if not line.strip():
        if cur: samples.append(cur); cur=None
        continue
    # a sample's header line: "TID TIME:", indented or not (perf 6 indents it)
    if re.match(r'^\s*\d+\s+[\d.]+:\s*$',line):
        m=re.match(r'\s*(\d+)\s+([\d.]+):',line)
        if m: cur=(int(m.group(1)),float(m.group(2)),[])
        continue
    if cur is not None:
        parts=line.strip().split(' ',1)
        cur[2].append(parts[1] if len(parts)>1 else '')
if cur: samples.append(cur)
tids=collections.Counter(s[0] for s in samples)
master,worker=[t for t,_ in tids.most_common(2)]
master=min(master,worker); worker=max(tids.most_common(2)[0][0],tids.most_common(2)[1][0])
def ctx(fr):
    leaf=fr[0] if fr else ''
    c=[f for f in fr if 'cifarnet::' in f]
    def short(f):
        f=re.sub(r'\(/.*\)$','',f); f=re.sub(r'<.*','',f); return f[:110]
    return short(leaf), (short(c[0]) if c else '-'), (short(c[-1]) if c else '-')
ms=sorted((s[1],s) for s in samples if s[0]==master)
mt=[x[0] for x in ms]
tally=collections.Counter(); tally2=collections.Counter(); n=0
T0=min(s[1] for s in samples); T1=max(s[1] for s in samples)
for s in samples:
    if s[1] < T0+(T1-T0)*0.4: continue
    if s[0]!=worker: continue
    if not s[2] or 'libgomp' not in s[2][0]: continue
    i=bisect.bisect_left(mt,s[1])
    best=None
    for j in (i-1,i):
        if 0<=j<len(mt) and (best is None or abs(mt[j]-s[1])<abs(mt[best]-s[1])): best=j
    if best is None or abs(mt[best]-s[1])>0.0003: continue
    l,c0,c1=ctx(ms[best][1][2]); n+=1
    tally[(l,c0)]+=1
print('worker libgomp samples matched',n,'of worker total',tids[worker])
for k,v in tally.most_common(40): print(v,k)
