/*
 * LD_PRELOAD shim for Debian's user-mode-linux 6.1 on hosts whose XSAVE area is larger
 * than the 832 bytes (x87 + SSE + AVX) UML 6.1 saves per guest thread: CPUs with
 * AVX-512 or AMX. There the host kernel refuses PTRACE_SETREGSET(NT_X86_XSTATE) with
 * EFAULT unless the buffer is the host's full XSAVE size, and UML 6.1 dies at its first
 * context switch ("userspace - ptrace set fp regs failed, errno = 14").
 *
 * The shim turns a short SETREGSET into a full one: it reads the thread's current full
 * XSAVE image, lays UML's x87/SSE/AVX part over it, keeps the thread's own state for the
 * components UML does not know, and sets the whole image. Guests must still not use
 * AVX-512 (UML cannot save it): scripts/nfs-testbed boots them with glibc's AVX-512
 * string functions switched off (GLIBC_TUNABLES).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>

#define XSAVE_HEADER 512        /* offset of xstate_bv in the standard XSAVE layout */
#define UML_COMPONENTS 0x7ULL   /* x87, SSE, AVX: what UML's own image holds */

static unsigned char whole_image[65536] __attribute__((aligned(64)));

typedef long (*ptrace_fn)(enum __ptrace_request, pid_t, void *, void *);

long ptrace(enum __ptrace_request request, ...)
{
    static ptrace_fn real;
    va_list ap;
    va_start(ap, request);
    pid_t pid = va_arg(ap, pid_t);
    void *addr = va_arg(ap, void *);
    void *data = va_arg(ap, void *);
    va_end(ap);
    if (!real)
        real = (ptrace_fn)dlsym(RTLD_NEXT, "ptrace");
    if (request == PTRACE_SETREGSET && (long)addr == NT_X86_XSTATE) {
        struct iovec *short_iov = data;
        struct iovec whole = { whole_image, sizeof(whole_image) };
        if (real(PTRACE_GETREGSET, pid, (void *)NT_X86_XSTATE, &whole) == 0
            && whole.iov_len > short_iov->iov_len
            && short_iov->iov_len >= XSAVE_HEADER + 8) {
            unsigned long long theirs, mine;
            memcpy(&theirs, whole_image + XSAVE_HEADER, 8);
            memcpy(whole_image, short_iov->iov_base, short_iov->iov_len);
            memcpy(&mine, whole_image + XSAVE_HEADER, 8);
            mine = (mine & UML_COMPONENTS) | (theirs & ~UML_COMPONENTS);
            memcpy(whole_image + XSAVE_HEADER, &mine, 8);
            return real(PTRACE_SETREGSET, pid, (void *)NT_X86_XSTATE, &whole);
        }
    }
    return real(request, pid, addr, data);
}
