# timeline.py TRACE: per commit of the committer thread (perf trace of the daemon, trace-many.sh):
# answers handed to queue threads (eventfd writes), time answering, gap from the sync's end to
# the next pwrite, time slept in futex waits meanwhile.
import re,sys,statistics as st
pat=re.compile(r'^\s*([\d.]+) \(\s*([\d.]*) ms\): (\S+?)/(\d+)\s+(?:\.\.\. \[continued\]: )?(\w+)\((.*?)\)\s+= (\S+)')
ev=[]
for l in open(sys.argv[1]):
    m=pat.match(l)
    if m and m.group(3)=='committer':
        t=float(m.group(1));d=float(m.group(2) or 0);ev.append((t,t+d,m.group(5),m.group(6)))
ev.sort()
rows=[];cur=None
for t0,t1,n,a in ev:
    if n=='fdatasync': cur={'end':t1,'sync':t1-t0,'ans':0,'ans_ms':0,'slept':0}
    elif cur is None: continue
    elif n=='write' and 'count: 8' in a: cur['ans']+=1; cur['last_ans']=t1
    elif n=='futex' and 'WAIT' in a: cur['slept']+=t1-t0
    elif n=='pwrite64' and 'count: 2097152' not in a:
        cur['gap']=t0-cur['end']; cur['ans_ms']=cur.get('last_ans',cur['end'])-cur['end']; rows.append(cur); cur=None
rows=[r for r in rows if r['ans']>0]
print('commits',len(rows))
for k in ['sync','ans','ans_ms','gap','slept']:
    v=[r[k] for r in rows]; print(k, 'median %.3f mean %.3f'%(st.median(v),st.mean(v)))
from collections import Counter; print('answers per commit',sorted(Counter(r['ans'] for r in rows).items()))
