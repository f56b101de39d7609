# Medians and per-round ratios of run.sh's output: python3 summarize.py rules_ab.txt
import collections, re, statistics as st, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    m = re.match(r'round (\d+) batch +(\d+) (\S+) +(\S+) ([\d.]+)', l)
    if m:
        d[(int(m[2]), m[4], m[3])].append(float(m[5]))
for b in (100, 1):
    for net in ('infer20', 'infer56'):
        base = d[(b, net, 'onednn')]
        print('batch %d %s onednn median %.0f [%s]' % (b, net, st.median(base), ' '.join('%.0f' % x for x in base)))
        for c in ('winograd', 'direct', 'both'):
            v = d[(b, net, c)]
            r = [x / y for x, y in zip(v, base)]
            print('   %-8s median %.0f, per round / onednn: %s; median ratio %.2f, faster in %d of %d' %
                  (c, st.median(v), ' '.join('%.2f' % x for x in r), st.median(r), sum(x > 1 for x in r), len(r)))
