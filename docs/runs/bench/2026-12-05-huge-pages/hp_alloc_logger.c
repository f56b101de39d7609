#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>
#include <execinfo.h>
#include <string.h>
extern void* __libc_memalign(size_t,size_t);
extern void* __libc_malloc(size_t);
static __thread int busy=0;
static void logit(size_t n){ if(busy||n<(1u<<20)) return; busy=1; void* bt[6]; int k=backtrace(bt,6); Dl_info d; const char* lib="?"; const char* sym="?";
 for(int i=1;i<k;i++){ if(dladdr(bt[i],&d)&&d.dli_fname&&!strstr(d.dli_fname,"hplog")&&!strstr(d.dli_fname,"libc.so")&&!strstr(d.dli_fname,"libstdc++")){lib=d.dli_fname; sym=d.dli_sname?d.dli_sname:"?"; break;} }
 fprintf(stderr,"BIG %zu %s %s\n",n,lib,sym); busy=0;}
#include <string.h>
void* aligned_alloc(size_t al, size_t n){ logit(n); return __libc_memalign(al,n);}
int posix_memalign(void**pp,size_t al,size_t n){ logit(n); void*p=__libc_memalign(al,n); if(!p) return 12; *pp=p; return 0;}
void* malloc(size_t n){ logit(n); return __libc_malloc(n);}
