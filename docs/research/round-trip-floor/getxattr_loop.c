#include <stdio.h>
#include <stdlib.h>
#include <sys/xattr.h>
#include <time.h>
int main(int c, char**v){ int n=atoi(v[2]); char b[64]; struct timespec a,z; clock_gettime(CLOCK_MONOTONIC,&a);
for(int i=0;i<n;i++) getxattr(v[1],"user.x",b,sizeof b);
clock_gettime(CLOCK_MONOTONIC,&z); printf("%.2f us/call\n", ((z.tv_sec-a.tv_sec)*1e9+(z.tv_nsec-a.tv_nsec))/1e3/n); }
