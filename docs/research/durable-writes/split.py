# Parse `perf trace -p DAEMON` at 1 writer into the steps of a durable write's commit path.
import re, sys, statistics as st
ev=[]
pat=re.compile(r'^\s*([\d.]+) \(\s*([\d.]+) ms\): (\S+?)/(\d+)\s+(?:\.\.\. \[continued\]: )?(\w+)\((.*?)\)\s+= (\S+)')
for line in open(sys.argv[1]):
    m=pat.match(line)
    if not m: continue
    t,d,comm,tid,name,args,ret=m.groups(); t=float(t); d=float(d)
    ev.append((t,t+d,comm,name,args,ret))
ev.sort()
rows=[]
for i,(t0,t1,comm,name,args,ret) in enumerate(ev):
    if name!='pwrite64' or 'count: 4' not in args: continue
    fs=next((e for e in ev[i+1:i+40] if e[2]==comm and e[3]=='fdatasync'),None)
    if not fs: continue
    before=ev[max(0,i-80):i]
    if comm.startswith('fuser'):  # the asker leads
        q=[e for e in before if e[2]==comm and e[3]=='io_uring_enter' and e[1]<=t0]
        if not q: continue
        arrival=q[-1][1]; woke=arrival; queue=comm
    else:
        wk=[e for e in before if e[2].startswith('fuser') and e[3]=='futex' and 'WAKE' in e[4] and e[0]<=t0]
        if not wk: continue
        notify=wk[-1]; queue=notify[2]
        q=[e for e in before if e[2]==queue and e[3]=='io_uring_enter' and e[1]<=notify[0]]
        cw=[e for e in before if e[2]==comm and e[3]=='futex' and ('WAIT' in e[4] or e[4] in ('', ')')) and e[1]>=notify[0]]
        if not q or not cw: continue
        arrival=q[-1][1]; woke=cw[0][1]
    after=[e for e in ev[i+1:i+120] if e[0]>=fs[1]]
    qn=next((e for e in after if e[2]==queue and e[3]=='io_uring_enter'),None)
    if not qn: continue
    rows.append({'arrival -> committing thread runs':woke-arrival,'-> pwrite starts':t0-woke,'pwrite':t1-t0,
        '-> fdatasync starts':fs[0]-t1,'fdatasync':fs[1]-fs[0],'-> reply sent (queue thread io_uring_enter)':qn[0]-fs[1],
        'total arrival -> reply':qn[0]-arrival,'lead':comm.startswith('fuser')})
n=len(rows); print(f"commits parsed: {n}, led by the asking FUSE thread: {sum(r['lead'] for r in rows)}")
for k in rows[0]:
    if k=='lead': continue
    v=[r[k]*1000 for r in rows]
    print(f"| {k} | {st.median(v):.0f} | {st.mean(v):.0f} |")
