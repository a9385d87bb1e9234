# counts.py TRACE WRITES: system calls per durable write of the committer and the FUSE queue threads.
import re,sys,collections
pat=re.compile(r'^\s*([\d.]+) \(\s*([\d.]*) ms\): (\S+?)/(\d+)\s+(?:\.\.\. \[continued\]: )?(\w+)\((.*?)\)\s+= (\S+)')
c=collections.Counter(); n=int(sys.argv[2])
for l in open(sys.argv[1]):
    m=pat.match(l)
    if not m or '[continued]' in l: continue
    g='fuser-q' if m.group(3).startswith('fuser-q') else m.group(3)
    c[(g,m.group(5))]+=1
print(' '.join(f"{g}.{s}={v/n:.2f}" for (g,s),v in sorted(c.items()) if g in('committer','fuser-q')))
