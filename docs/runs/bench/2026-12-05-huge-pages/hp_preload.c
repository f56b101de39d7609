#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <malloc.h>
static void* big(size_t n){ size_t a=2u<<20; size_t r=(n+a-1)&~(a-1); void*p=NULL; extern void* __libc_memalign(size_t,size_t); p=__libc_memalign(a,r); if(p) madvise(p,r,MADV_HUGEPAGE); return p;}
void* aligned_alloc(size_t al, size_t n){ extern void* __libc_memalign(size_t,size_t); if(n>=(1u<<20)) return big(n); return __libc_memalign(al,n);}
int posix_memalign(void**pp,size_t al,size_t n){ extern void* __libc_memalign(size_t,size_t); void*p = n>=(1u<<20)? big(n): __libc_memalign(al,n); if(!p) return 12; *pp=p; return 0;}
void* malloc(size_t n){ extern void* __libc_malloc(size_t); if(n>=(1u<<20)) return big(n); return __libc_malloc(n);}
