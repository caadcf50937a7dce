"""python3 Tests/Benchmarks/commit-pages-by-database.py DATA_MDB TRACE: the pages the last commit of a
traced run (`strace -f -y -e trace=pwrite64,writev,lseek,fdatasync`, as commit-pages.py) wrote, by the
database that holds each afterwards: walks the B-trees of the resulting data.mdb (LMDB 0.9's page
layout, 4 KiB pages). docs/benchmarks.md, "Storage format 3"."""
import re, sys, collections, struct
data=open(sys.argv[1],'rb').read(); P=4096
def page(n): return data[n*P:(n+1)*P]
def meta(n):
    p=page(n); o=16
    dbs=[struct.unpack_from('<IHHQQQQQ',p,o+24+48*i) for i in range(2)]
    last,txn=struct.unpack_from('<QQ',p,o+24+96); return dbs,txn
dbs,_=max([meta(0),meta(1)],key=lambda m:m[1])
owner={}
def nodes(p):
    lower,upper=struct.unpack_from('<HH',p,12)
    for i in range((lower-16)//2):
        off=struct.unpack_from('<H',p,16+2*i)[0]
        lo,hi,fl,ks=struct.unpack_from('<HHHH',p,off)
        yield lo,hi,fl,p[off+8:off+8+ks],off
def walk(root,name,kind='tree'):
    if root==0xffffffffffffffff: return
    stack=[(root,kind)]
    while stack:
        n,kd=stack.pop(); p=page(n); f=struct.unpack_from('<H',p,10)[0]
        tag=name if kd=='tree' else name+'('+kd+')'
        owner[n]=tag+(' branch' if f&1 else '')
        if f&4:
            for k in range(1,struct.unpack_from('<I',p,12)[0]): owner[n+k]=tag+' overflow'
            continue
        if f&0x20: continue
        for lo,hi,fl,k,off in nodes(p):
            if f&1: stack.append((lo|hi<<16|fl<<32,kd)); continue
            d=p[off+8+len(k):off+8+len(k)+(lo|hi<<16)]
            if fl&1: stack.append((struct.unpack_from('<Q',d,0)[0],'big'))
            elif fl&2 and fl&4: walk(struct.unpack_from('<IHHQQQQQ',d,0)[7],name,'subdb')
            elif fl&2 and name=='main': walk(struct.unpack_from('<IHHQQQQQ',d,0)[7],k.decode())
walk(dbs[1][7],'main'); walk(dbs[0][7],'freelist')
lines=open(sys.argv[2]).read().splitlines()
syncs=[i for i,l in enumerate(lines) if 'fdatasync(' in l and 'data.mdb' in l]
start=syncs[-2] if len(syncs)>1 else 0; end=syncs[-1]
written=set()
for line in lines[start:end]:
    if 'data.mdb>' not in line: continue
    m=re.search(r'pwrite64\(\d+<[^>]*data\.mdb>, .*, (\d+), (\d+)\) = (\d+)',line)
    if m:
        for k in range(int(m.group(3))//P): written.add(int(m.group(2))//P+k)
        continue
    m=re.search(r'lseek\(\d+<[^>]*data\.mdb>, (\d+), SEEK_SET\)',line)
    if m: pos=int(m.group(1)); continue
    m=re.search(r'writev\(\d+<[^>]*data\.mdb>, .*\) = (\d+)',line)
    if m:
        for k in range(int(m.group(1))//P): written.add(pos//P+k)
c=collections.Counter()
for n in written:
    name=owner.get(n,'not live')
    c[re.sub(r'recent-\d+','recent-*',name)]+=1
print(len(written)); print(c.most_common())
