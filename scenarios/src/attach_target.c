/* attach-target: a program for `syncspy attach` to attach to, built three ways by build.rs
 * (lazy binding, BIND_NOW with full RELRO, -fno-plt). It links libcudart.so.13 and
 * libcuda.so.1 (both the simulated runtime at run time) and takes commands on stdin, one per
 * line, answering each with one line on stdout, so a test knows exactly which calls happened
 * when:
 *
 *   sync N        N x cudaStreamSynchronize(0)            -> "done sync N"
 *   devsync N     N x cudaDeviceSynchronize()             -> "done devsync N"
 *   memcpy N      N x cudaMemcpy 4 KiB device to host     -> "done memcpy N"
 *   paced R N     N x that copy, R a second: R/500 back to back every 2 ms (sleeping
 *                 to each batch's time; a late batch starts at once) -> "done paced N"
 *   drv N         N x cuStreamSynchronize(0), the driver's import -> "done drv N"
 *   dsym N        N x cuStreamSynchronize(0) through a pointer that dlsym on a fresh
 *                 dlopen("libcuda.so.1") handle returns   -> "done dsym N"
 *   dlopen PATH   dlopen(PATH, RTLD_NOW|RTLD_LOCAL)       -> "done dlopen"
 *   lib N         N x caller_work(1, 10) of that library  -> "done lib N"
 *   fork N        a child makes N x cudaStreamSynchronize(0) and exits 0 -> "done fork N STATUS"
 *   storm on|off  a thread sends SIGUSR1 to the process and SIGRTMIN to the main thread
 *   slots         prints "slot NAME 0xADDR" per GOT slot of a cuda* function,
 *                 cuStreamSynchronize and dlsym, then "done slots"
 *   exit CODE     prints "signals SENT RECEIVED rt SENT RECEIVED eintr N stack N" and exits
 *                 with CODE
 *
 * With ATTACH_TARGET_NO_MEMFD=1 in its environment it first installs a seccomp filter (on all
 * its threads) that fails memfd_create with EPERM, as a container's profile may.
 *
 * At start it prints "ready main=TID waiter=TID sleeper=TID epoller=TID". The waiter blocks
 * in pthread_cond_wait (futex), the sleeper in nanosleep, the epoller in epoll_wait (counting
 * the EINTRs it gets), the main thread in read(0): each a thread attach may choose. The main thread reads with a raw read system call between
 * loading xmm0/xmm7/xmm15 with a pattern and a non-default MXCSR, and 4 KiB of the stack
 * below its red zone, and checking them after: a clobbered FP/vector register set (an
 * injection that did not restore it) exits 99; a changed stack is counted. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern int cudaStreamSynchronize(void *stream);
extern int cudaDeviceSynchronize(void);
extern int cudaMalloc(void **p, size_t n);
extern int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
extern int cuStreamSynchronize(void *stream);

static volatile sig_atomic_t usr1_received, rt_received;
static volatile long usr1_sent, rt_sent;
static volatile int storm;
static pid_t main_tid;

static void on_usr1(int s) { (void)s; usr1_received++; }
static void on_rt(int s) { (void)s; rt_received++; }

static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static volatile pid_t waiter_tid, sleeper_tid, epoller_tid;
static volatile int epoll_eintr;
static int stack_changed;

/* Waits in epoll_wait on a pipe nobody writes: an EINTR it sees with no signal sent to the
 * process is one an attach caused. */
static void *epoller(void *a) {
    (void)a;
    int fds[2];
    if (pipe(fds)) return NULL;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev);
    epoller_tid = gettid_();
    for (;;) {
        struct epoll_event out;
        if (epoll_wait(ep, &out, 1, -1) < 0 && errno == EINTR) epoll_eintr++;
    }
    return NULL;
}

static void *waiter(void *a) {
    (void)a;
    waiter_tid = gettid_();
    pthread_mutex_lock(&mu);
    for (;;) pthread_cond_wait(&cv, &mu);
    return NULL;
}

static void *sleeper(void *a) {
    (void)a;
    sleeper_tid = gettid_();
    for (;;) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void *stormer(void *a) {
    (void)a;
    for (;;) {
        if (storm) {
            kill(getpid(), SIGUSR1);
            usr1_sent++;
            union sigval v = {0};
            if (sigqueue(getpid(), SIGRTMIN, v) == 0) rt_sent++;
        }
        usleep(100);
    }
    return NULL;
}

/* read(0) as a raw system call with vector registers and MXCSR holding known values across
 * it (nothing in the kernel's return path touches them), and 4 KiB of the dead stack below
 * the red zone holding a pattern (only a signal handler may write there, and none runs in
 * tests that check it). Returns the byte count, or exits 99 when registers changed; counts
 * the reads after which that memory had changed (stack_changed). */
static long checked_read(char *buf, size_t n) {
    static const uint64_t pat = 0x5eed5eed12345678ull;
    /* 0: SSE only, 1: also the upper half of ymm1, 2: also the upper half of zmm2 and k1 */
    static int level = -1;
    if (level < 0)
        level = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx") ? 1 : 0;
    /* x0 x7 x15 ymm1-high zmm2-high k1 */
    uint64_t res[6] = {0, 0, 0, pat, pat, 0x5a5a}, bad;
    uint32_t mx_in = 0x3f80 /* round down: not the default 0x1f80 */, mx_out, mx_saved;
    long ret;
    __asm__ volatile("stmxcsr %0" : "=m"(mx_saved));
    do {
        long sigs = usr1_received + rt_received;
        __asm__ volatile(
            "lea -4224(%%rsp), %%r8\n\t"
            "mov $512, %%r9\n\t"
            "1: mov %[pat], (%%r8)\n\t"
            "add $8, %%r8\n\t"
            "dec %%r9\n\t"
            "jnz 1b\n\t"
            "cmpl $1, %[lvl]\n\t"
            "jb 4f\n\t"
            "vmovq %[pat], %%xmm1\n\t"
            "vinsertf128 $1, %%xmm1, %%ymm1, %%ymm1\n\t"
            "cmpl $2, %[lvl]\n\t"
            "jb 4f\n\t"
            "vmovq %[pat], %%xmm2\n\t"
            "vinserti64x4 $1, %%ymm2, %%zmm2, %%zmm2\n\t"
            "mov $0x5a5a, %%r8d\n\t"
            "kmovw %%r8d, %%k1\n\t"
            "4: ldmxcsr %[mxin]\n\t"
            "movq %[pat], %%xmm0\n\t"
            "movq %[pat], %%xmm7\n\t"
            "movq %[pat], %%xmm15\n\t"
            "syscall\n\t"
            "movq %%xmm0, 0(%[res])\n\t"
            "movq %%xmm7, 8(%[res])\n\t"
            "movq %%xmm15, 16(%[res])\n\t"
            "stmxcsr %[mxout]\n\t"
            "cmpl $1, %[lvl]\n\t"
            "jb 5f\n\t"
            "vextractf128 $1, %%ymm1, %%xmm1\n\t"
            "vmovq %%xmm1, 24(%[res])\n\t"
            "cmpl $2, %[lvl]\n\t"
            "jb 5f\n\t"
            "vextracti64x4 $1, %%zmm2, %%ymm2\n\t"
            "vmovq %%xmm2, 32(%[res])\n\t"
            "kmovw %%k1, %%r8d\n\t"
            "mov %%r8, 40(%[res])\n\t"
            "5: vzeroupper\n\t"
            "lea -4224(%%rsp), %%r8\n\t"
            "mov $512, %%r9\n\t"
            "xor %%r10, %%r10\n\t"
            "2: cmp %[pat], (%%r8)\n\t"
            "je 3f\n\t"
            "inc %%r10\n\t"
            "3: add $8, %%r8\n\t"
            "dec %%r9\n\t"
            "jnz 2b\n\t"
            "mov %%r10, %[bad]\n\t"
            : "=a"(ret), [mxout] "=m"(mx_out), [bad] "=&r"(bad)
            : "a"(0L), "D"(0L), "S"(buf), "d"(n), [pat] "r"(pat), [mxin] "m"(mx_in),
              [res] "r"(res), [lvl] "r"(level)
            : "rcx", "r8", "r9", "r10", "r11", "memory", "xmm0", "xmm1", "xmm2", "xmm7", "xmm15",
              "cc");
        if (usr1_received + rt_received != sigs) bad = 0; /* a handler ran on this stack */
    } while (ret == -4 /* EINTR */);
    __asm__ volatile("ldmxcsr %0" : : "m"(mx_saved));
    if (bad) stack_changed++;
    if (res[0] != pat || res[1] != pat || res[2] != pat || res[3] != pat || res[4] != pat ||
        res[5] != 0x5a5a || mx_out != mx_in) {
        printf("FP CLOBBERED xmm0=%llx xmm7=%llx xmm15=%llx ymm1hi=%llx zmm2hi=%llx k1=%llx "
               "mxcsr=%x\n",
               (unsigned long long)res[0], (unsigned long long)res[1], (unsigned long long)res[2],
               (unsigned long long)res[3], (unsigned long long)res[4], (unsigned long long)res[5],
               mx_out);
        fflush(stdout);
        _exit(99);
    }
    return ret;
}

static int read_line(char *line, size_t cap) {
    size_t len = 0;
    while (len + 1 < cap) {
        char c;
        long r = checked_read(&c, 1);
        if (r <= 0) return len > 0;
        if (c == '\n') break;
        line[len++] = c;
    }
    line[len] = 0;
    return 1;
}

/* Prints the address of every JUMP_SLOT / GLOB_DAT slot of a cuda* symbol of the program. */
static int print_slot(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (info->dlpi_name && info->dlpi_name[0]) return 0; /* the main program only */
    ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 1;
    ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    ElfW(Rela) *tabs[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    for (ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        /* glibc relocates these in place for a writable dynamic section */
        ElfW(Addr) p = d->d_un.d_ptr;
        if (p < info->dlpi_addr) p += info->dlpi_addr;
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (ElfW(Sym) *)p; break;
        case DT_STRTAB: strtab = (const char *)p; break;
        case DT_JMPREL: tabs[0] = (ElfW(Rela) *)p; break;
        case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
        case DT_RELA: tabs[1] = (ElfW(Rela) *)p; break;
        case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
        }
    }
    for (int t = 0; t < 2; t++) {
        if (!tabs[t]) continue;
        for (size_t i = 0; i < sizes[t] / sizeof(ElfW(Rela)); i++) {
            ElfW(Rela) *r = &tabs[t][i];
            unsigned type = ELF64_R_TYPE(r->r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
            const char *name = strtab + symtab[ELF64_R_SYM(r->r_info)].st_name;
            if (strncmp(name, "cuda", 4) == 0 || strcmp(name, "cuStreamSynchronize") == 0 ||
                strcmp(name, "dlsym") == 0)
                printf("slot %s 0x%lx\n", name, (unsigned long)(info->dlpi_addr + r->r_offset));
        }
    }
    return 1;
}

/* memfd_create fails with EPERM from now on, in every thread (x86-64 only, as the test). */
static int forbid_memfd(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *no_memfd = getenv("ATTACH_TARGET_NO_MEMFD");
    if (no_memfd && !strcmp(no_memfd, "1") && forbid_memfd()) {
        printf("seccomp failed\n");
        return 3;
    }
    main_tid = gettid_();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_rt;
    sigaction(SIGRTMIN, &sa, NULL);
    pthread_t th;
    pthread_create(&th, NULL, waiter, NULL);
    pthread_create(&th, NULL, sleeper, NULL);
    pthread_create(&th, NULL, stormer, NULL);
    pthread_create(&th, NULL, epoller, NULL);
    while (!waiter_tid || !sleeper_tid || !epoller_tid) usleep(1000);
    void *dev = NULL;
    static char host[4096];
    if (cudaMalloc(&dev, sizeof host)) {
        printf("cudaMalloc failed\n");
        return 3;
    }
    int (*caller_work)(int, unsigned) = NULL;
    printf("ready main=%d waiter=%d sleeper=%d epoller=%d\n", main_tid, waiter_tid, sleeper_tid,
           epoller_tid);
    char line[512];
    while (read_line(line, sizeof line)) {
        long n = 0, rate = 0;
        char arg[480];
        if (sscanf(line, "sync %ld", &n) == 1) {
            for (long i = 0; i < n; i++) cudaStreamSynchronize(NULL);
            printf("done sync %ld\n", n);
        } else if (sscanf(line, "devsync %ld", &n) == 1) {
            for (long i = 0; i < n; i++) cudaDeviceSynchronize();
            printf("done devsync %ld\n", n);
        } else if (sscanf(line, "memcpy %ld", &n) == 1) {
            for (long i = 0; i < n; i++) cudaMemcpy(host, dev, sizeof host, 2);
            printf("done memcpy %ld\n", n);
        } else if (sscanf(line, "paced %ld %ld", &rate, &n) == 2 && rate > 0) {
            long batch = rate / 500 > 0 ? rate / 500 : 1;
            struct timespec at;
            clock_gettime(CLOCK_MONOTONIC, &at);
            for (long i = 0; i < n; i++) {
                if (i > 0 && i % batch == 0) {
                    at.tv_nsec += 2000000;
                    if (at.tv_nsec >= 1000000000) {
                        at.tv_sec++;
                        at.tv_nsec -= 1000000000;
                    }
                    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
                }
                cudaMemcpy(host, dev, sizeof host, 2);
            }
            printf("done paced %ld\n", n);
        } else if (sscanf(line, "drv %ld", &n) == 1) {
            for (long i = 0; i < n; i++) cuStreamSynchronize(NULL);
            printf("done drv %ld\n", n);
        } else if (sscanf(line, "dsym %ld", &n) == 1) {
            void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
            int (*f)(void *) = h ? (int (*)(void *))dlsym(h, "cuStreamSynchronize") : NULL;
            for (long i = 0; i < n && f; i++) f(NULL);
            if (h) dlclose(h);
            printf(f ? "done dsym %ld\n" : "dsym failed %ld\n", n);
        } else if (sscanf(line, "dlopen %479s", arg) == 1) {
            void *h = dlopen(arg, RTLD_NOW | RTLD_LOCAL);
            if (h) caller_work = (int (*)(int, unsigned))dlsym(h, "caller_work");
            printf(caller_work ? "done dlopen\n" : "dlopen failed %s\n", dlerror());
        } else if (sscanf(line, "lib %ld", &n) == 1) {
            for (long i = 0; i < n && caller_work; i++) caller_work(1, 10);
            printf("done lib %ld\n", n);
        } else if (sscanf(line, "fork %ld", &n) == 1) {
            pid_t child = fork();
            if (child == 0) {
                for (long i = 0; i < n; i++) cudaStreamSynchronize(NULL);
                _exit(0);
            }
            int st = -1;
            waitpid(child, &st, 0);
            printf("done fork %ld %d\n", n, st);
        } else if (strcmp(line, "storm on") == 0) {
            storm = 1;
            printf("done storm\n");
        } else if (strcmp(line, "storm off") == 0) {
            storm = 0;
            usleep(20000);
            printf("done storm\n");
        } else if (strcmp(line, "slots") == 0) {
            dl_iterate_phdr(print_slot, NULL);
            printf("done slots\n");
        } else if (sscanf(line, "exit %ld", &n) == 1) {
            storm = 0;
            usleep(20000);
            printf("signals %ld %d rt %ld %d eintr %d stack %d\n", usr1_sent, (int)usr1_received,
                   rt_sent, (int)rt_received, epoll_eintr, stack_changed);
            fflush(stdout);
            exit((int)n);
        } else {
            printf("unknown %s\n", line);
        }
    }
    return 0;
}
