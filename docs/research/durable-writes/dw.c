// durable small writes: T threads, each: open(O_CREAT|O_EXCL), write 4 KiB, fsync, close
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>
#include <string.h>
#include <sys/stat.h>
static const char *dir; static int per; static char buf[4096];
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static double *lat;
static void *run(void *a){ long id=(long)a; char p[512];
  snprintf(p,sizeof p,"%s/t%ld",dir,id); mkdir(p,0755);
  for(int i=0;i<per;i++){ snprintf(p,sizeof p,"%s/t%ld/f%d",dir,id,i); double t0=now();
    int fd=open(p,O_CREAT|O_EXCL|O_WRONLY,0644); if(fd<0){perror("open");exit(1);}
    if(write(fd,buf,4096)!=4096){perror("write");exit(1);} if(fsync(fd)){perror("fsync");exit(1);} if(close(fd)){perror("close");exit(1);}
    lat[id*per+i]=now()-t0;}
  return 0;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int c,char**v){ dir=v[1]; int T=atoi(v[2]); per=atoi(v[3]); memset(buf,'x',4096);
  lat=malloc(sizeof(double)*T*per); pthread_t th[64]; double t0=now();
  for(long i=0;i<T;i++) pthread_create(&th[i],0,run,(void*)i);
  for(int i=0;i<T;i++) pthread_join(th[i],0); double el=now()-t0;
  qsort(lat,T*per,sizeof(double),cmp);
  printf("threads %d writes %d: %.0f writes/s p50 %.3f ms p99 %.3f ms\n",T,T*per,T*per/el,lat[T*per/2]*1e3,lat[T*per*99/100]*1e3);}
