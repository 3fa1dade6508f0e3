import csv,sys,collections,re
path=sys.argv[1]; want=sys.argv[2:] 
rows=csv.reader(open(path))
file=func=None; line=None; hdr=None
agg=collections.defaultdict(lambda: collections.Counter())
tot=collections.Counter()
for r in rows:
    if not r: continue
    if r[0]=='File Path': file=r[1].split('/src/')[-1]; continue
    if r[0]=='Function Name': func=r[1]; continue
    if r[0]=='Line No': hdr=r; continue
    if r[0]!='': line=(file,int(r[0])); continue
    # sass row
    try: s=int(r[4])
    except: continue
    key=('det' if '(bool)0, (bool)0, (bool)1>' in func else 'def' if '(bool)0, (bool)0, (bool)0>' in func else None)
    if key is None or 'bwd_kernel_sm90' not in func: continue
    agg[key][line]+=s; tot[key]+=s
    # stall reasons
    for i,h in enumerate(hdr):
        if h.startswith('stall_') and '(Not' not in h:
            try: v=int(r[i])
            except: v=0
            if v: agg[key+':'+h][line]+=v; tot[key+':'+h]+=v
for k in ('def','det'):
    print('==',k,'total samples',tot[k])
    for (l,c) in agg[k].most_common(25): print('  %6d %5.1f%%  %s:%d'%(c,100*c/tot[k],l[0],l[1]))
    print('  reasons:', {h.split(':')[1]:round(100*v/tot[k],1) for h,v in tot.items() if h.startswith(k+':') and v>tot[k]*0.01})
