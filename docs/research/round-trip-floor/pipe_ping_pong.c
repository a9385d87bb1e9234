#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>
int a[2], b[2]; int n;
void* srv(void*x){ char c; for(int i=0;i<n;i++){ read(a[0],&c,1); write(b[1],&c,1);} return 0; }
int main(int ac,char**av){ n=atoi(av[1]); pipe(a); pipe(b); pthread_t t; pthread_create(&t,0,srv,0);
 struct timespec s,e; char c='x'; clock_gettime(CLOCK_MONOTONIC,&s);
 for(int i=0;i<n;i++){ write(a[1],&c,1); read(b[0],&c,1);} clock_gettime(CLOCK_MONOTONIC,&e);
 printf("%.2f us/roundtrip\n", ((e.tv_sec-s.tv_sec)*1e9+(e.tv_nsec-s.tv_nsec))/1e3/n); }
