// MBFS-like copy loop: copy SRC to DIR/copy N times in 128 KiB chunks, close, unlink, sync.
// Prints per copy: total ms, write-loop ms, close ms.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
int main(int argc,char**argv){
  const char*src=argv[1];const char*dir=argv[2];int n=atoi(argv[3]);int dosync=argc>4?atoi(argv[4]):1;
  static char buf[128*1024];char dst[4096];snprintf(dst,sizeof dst,"%s/copy",dir);
  double tot=0,tl=0,tc=0; double *all=calloc(n,sizeof(double));
  for(int i=0;i<n;i++){
    double t0=now();
    int a=open(src,O_RDONLY);int b=open(dst,O_WRONLY|O_CREAT|O_EXCL,0644);
    if(a<0||b<0){perror("open");return 1;}
    ssize_t r;while((r=read(a,buf,sizeof buf))>0){if(write(b,buf,r)!=r){perror("write");return 1;}}
    double t1=now();
    close(a);if(close(b)){perror("close");return 1;}
    double t2=now();
    tot+=t2-t0;tl+=t1-t0;tc+=t2-t1;all[i]=t2-t0;
    unlink(dst); if(dosync) sync();
  }
  // median
  for(int i=0;i<n;i++)for(int j=i+1;j<n;j++)if(all[j]<all[i]){double x=all[i];all[i]=all[j];all[j]=x;}
  printf("copies %d mean %.2f ms (loop %.2f close %.2f) median %.2f ms = %.0f MiB/s\n",n,tot/n,tl/n,tc/n,all[n/2],10.0/(all[n/2]/1e3));
  return 0;}
