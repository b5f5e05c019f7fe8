/* test_shm.c — shared/shm.c: segments and their checks, the arena of
 * pages, descriptors over Unix sockets, the transport names. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cmocka.h>

#include "shared/shm.h"

#define MIB (1u << 20)

static void test_segment_sealed(void **state)
{
    (void)state;
    shm_seg s;
    char err[256];
    assert_int_equal(shm_seg_create(&s, "t", MIB + 1, true, err, sizeof err), 0);
    assert_true(s.size >= MIB + 1 && s.size % 4096 == 0); /* whole pages */
    s.base[0] = 7; /* ours stays writable */
    int seals = fcntl(s.fd, F_GET_SEALS);
    assert_true(seals & F_SEAL_SHRINK);
    assert_true(seals & F_SEAL_GROW);
    assert_int_equal(ftruncate(s.fd, 0), -1); /* nobody shrinks it */
    assert_int_equal(errno, EPERM);
    /* A writable mapping made now is refused (peers map it read-only). */
    assert_ptr_equal(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd, 0), MAP_FAILED);
    /* A peer's view: read-only, the same bytes. */
    shm_seg peer;
    assert_int_equal(shm_seg_map_peer(&peer, dup(s.fd), 2 * MIB, err, sizeof err), 0);
    assert_false(peer.writable);
    assert_int_equal(peer.size, s.size);
    assert_int_equal(peer.base[0], 7);
    assert_true(shm_seg_holds(&peer, 0, peer.size));
    assert_true(shm_seg_holds(&peer, peer.size, 0));
    assert_false(shm_seg_holds(&peer, 1, peer.size));
    assert_false(shm_seg_holds(&peer, UINT64_MAX - 2, 4)); /* no overflow */
    shm_seg_close(&peer);
    shm_seg_close(&s);
    assert_int_equal(s.fd, -1);
    shm_seg_close(&s); /* a no-op */
}

static void test_segments_refused(void **state)
{
    (void)state;
    shm_seg s;
    char err[256];
    /* not sealed against shrinking */
    int fd = memfd_create("t", MFD_ALLOW_SEALING);
    assert_int_equal(ftruncate(fd, MIB), 0);
    assert_int_equal(shm_seg_map_peer(&s, fd, 2 * MIB, err, sizeof err), -1);
    assert_non_null(strstr(err, "not sealed against shrinking"));
    assert_int_equal(fcntl(fd, F_GETFD), -1); /* taken, and closed */
    /* larger than allowed */
    assert_int_equal(shm_seg_create(&s, "t", 4 * MIB, false, err, sizeof err), 0);
    shm_seg big;
    assert_int_equal(shm_seg_map_peer(&big, dup(s.fd), MIB, err, sizeof err), -1);
    assert_non_null(strstr(err, "at most 1048576 taken"));
    shm_seg_close(&s);
    /* not a memfd: a pipe, /dev/null */
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(shm_seg_map_peer(&s, p[0], MIB, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a memfd"));
    close(p[1]);
    assert_int_equal(shm_seg_map_peer(&s, open("/dev/null", O_RDONLY), MIB, err, sizeof err), -1);
    /* empty */
    fd = memfd_create("t", MFD_ALLOW_SEALING);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    assert_int_equal(shm_seg_map_peer(&s, fd, MIB, err, sizeof err), -1);
    assert_null(s.base);
}

/* A memfd of hugetlbfs seals and maps like any, and its size is what it
 * says; its pages come from the huge-page pool at the first touch, and
 * where the pool is empty that touch is SIGBUS: refused before mapping.
 * Skipped, with the reason, where the kernel makes no such memfd. */
static void test_segment_hugetlb_refused(void **state)
{
    (void)state;
    shm_seg s;
    char err[256];
    int fd = memfd_create("t", MFD_HUGETLB | MFD_ALLOW_SEALING);
    if (fd < 0) {
        print_message("skipped: memfd_create(MFD_HUGETLB): %s\n", strerror(errno));
        skip();
    }
    if (ftruncate(fd, 2 * MIB) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
        print_message("skipped: a sealed hugetlbfs memfd of 2 MiB: %s\n", strerror(errno));
        close(fd);
        skip();
    }
    assert_int_equal(shm_seg_map_peer(&s, fd, 4 * MIB, err, sizeof err), -1);
    assert_non_null(strstr(err, "the segment sent is on hugetlbfs, not ordinary shared memory"));
    assert_null(s.base);
    assert_int_equal(fcntl(fd, F_GETFD), -1); /* taken, and closed */
}

/* The check itself (shm_fd_check_shmem: every descriptor a peer sent,
 * before this process maps it): a memfd passes; whatever is not shmem is
 * refused naming its file system — a pipe and a socket everywhere, a file
 * on disk where the working folder is not tmpfs. */
static void test_shmem_check(void **state)
{
    (void)state;
    char err[256];
    int fd = memfd_create("t", MFD_ALLOW_SEALING);
    assert_int_equal(shm_fd_check_shmem(fd, "x", err, sizeof err), 0);
    close(fd);
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(shm_fd_check_shmem(p[0], "the pipe", err, sizeof err), -1);
    assert_non_null(strstr(err, "the pipe is on a file system of type 0x"));
    assert_non_null(strstr(err, "not ordinary shared memory"));
    close(p[0]);
    close(p[1]);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(shm_fd_check_shmem(sv[0], "x", err, sizeof err), -1);
    close(sv[0]);
    close(sv[1]);
    fd = open(".", O_TMPFILE | O_RDWR, 0600);
    if (fd >= 0) {
        struct statfs sf;
        assert_int_equal(fstatfs(fd, &sf), 0);
        if (sf.f_type != 0x01021994) /* TMPFS_MAGIC: a tmpfs build folder */
            assert_int_equal(shm_fd_check_shmem(fd, "x", err, sizeof err), -1);
        close(fd);
    }
    assert_int_equal(shm_fd_check_shmem(-1, "x", err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot be examined"));
}

static void test_arena(void **state)
{
    (void)state;
    shm_arena a;
    char err[256];
    assert_int_equal(shm_arena_init(&a, "t", 16 * 4096, false, err, sizeof err), 0);
    uint8_t *p1 = shm_arena_alloc(&a, 1);          /* a page */
    uint8_t *p2 = shm_arena_alloc(&a, 4096 + 1);   /* two */
    uint8_t *p3 = shm_arena_alloc(&a, 3 * 4096);   /* three */
    assert_non_null(p1);
    assert_ptr_equal(p2, p1 + 4096);
    assert_ptr_equal(p3, p2 + 2 * 4096);
    assert_int_equal(a.pages.used_bytes, 6 * 4096);
    uint64_t off;
    assert_true(shm_arena_owns(&a, p3, 3 * 4096, &off));
    assert_int_equal(off, 3 * 4096);
    assert_false(shm_arena_owns(&a, p3, 14 * 4096, &off));
    int x;
    assert_false(shm_arena_owns(&a, &x, 4, &off));
    memset(p2, 0x5a, 2 * 4096);
    /* Freed pages come back zeroed (given back to the kernel), and the
     * hole is reused first fit. */
    shm_arena_free(&a, p2);
    assert_int_equal(a.pages.used_bytes, 4 * 4096);
    uint8_t *q = shm_arena_alloc(&a, 4096);
    assert_ptr_equal(q, p2);
    assert_int_equal(q[0], 0);
    /* Neighbours merge: free all, and the whole arena is one range again. */
    shm_arena_free(&a, p1);
    shm_arena_free(&a, p3);
    shm_arena_free(&a, q);
    assert_int_equal(a.pages.used_bytes, 0);
    assert_int_equal(a.pages.nfree, 1);
    uint8_t *all = shm_arena_alloc(&a, 16 * 4096);
    assert_ptr_equal(all, a.seg.base);
    assert_null(shm_arena_alloc(&a, 1)); /* full */
    shm_arena_free(&a, all);
    assert_null(shm_arena_alloc(&a, 17 * 4096)); /* larger than the arena */
    assert_null(shm_arena_alloc(&a, 0));
    shm_arena_destroy(&a);
    assert_int_equal(a.seg.fd, -1);
}

static void test_arena_many(void **state)
{
    (void)state;
    /* Allocate and free in a scattered order: the free list stays sorted
     * and merged, and everything comes back. */
    shm_arena a;
    char err[256];
    enum { N = 64 };
    assert_int_equal(shm_arena_init(&a, "t", N * 2 * 4096, false, err, sizeof err), 0);
    void *p[N];
    for (int i = 0; i < N; i++)
        assert_non_null(p[i] = shm_arena_alloc(&a, (size_t)(1 + i % 2) * 4096));
    for (int i = 0; i < N; i += 2)
        shm_arena_free(&a, p[i]);
    for (int i = N - 1; i > 0; i -= 2)
        shm_arena_free(&a, p[i]);
    assert_int_equal(a.pages.used_bytes, 0);
    assert_int_equal(a.pages.nfree, 1);
    assert_int_equal(a.pages.free[0].len, a.seg.size);
    shm_arena_destroy(&a);
}

static void test_descriptors(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int fd = memfd_create("t", 0);
    struct iovec iov = {"abc", 3};
    assert_int_equal(shm_send_fd(sv[0], &iov, 1, fd), 3);
    char buf[16];
    int fds[2], n = 0;
    bool trunc = false;
    assert_int_equal(shm_recv_fds(sv[1], buf, sizeof buf, fds, &n, 2, &trunc), 3);
    assert_int_equal(n, 1);
    assert_false(trunc);
    struct stat a, b;
    assert_int_equal(fstat(fd, &a), 0);
    assert_int_equal(fstat(fds[0], &b), 0);
    assert_int_equal(a.st_ino, b.st_ino);
    assert_true(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
    close(fds[0]);
    /* More than the caller takes: the rest are closed, never left open. */
    assert_int_equal(shm_send_fd(sv[0], &iov, 1, fd), 3);
    n = 0;
    assert_int_equal(shm_recv_fds(sv[1], buf, sizeof buf, fds, &n, 0, &trunc), 3);
    assert_int_equal(n, 0);
    /* No descriptor: plain bytes. */
    assert_int_equal(shm_send_fd(sv[0], &iov, 1, -1), 3);
    assert_int_equal(shm_recv_fds(sv[1], buf, sizeof buf, fds, &n, 2, &trunc), 3);
    assert_int_equal(n, 0);
    close(fd);
    close(sv[0]);
    close(sv[1]);
}

static void test_names_and_sockets(void **state)
{
    (void)state;
    char name[96], err[256];
    shm_socket_name(name, sizeof name, "test");
    assert_true(shm_name_ok(name, strlen(name)));
    assert_false(shm_name_ok("", 0));
    assert_false(shm_name_ok("a/b", 3));
    assert_false(shm_name_ok("a b", 3));
    assert_false(shm_name_ok("a\nb", 3));
    char longname[128];
    memset(longname, 'x', sizeof longname);
    assert_false(shm_name_ok(longname, sizeof longname));
    int l = shm_listen(name, 4, err, sizeof err);
    assert_true(l >= 0);
    assert_int_equal(shm_listen(name, 4, err, sizeof err), -1); /* taken */
    int c = shm_connect(name, err, sizeof err);
    assert_true(c >= 0);
    close(c);
    close(l);
    assert_int_equal(shm_connect(name, err, sizeof err), -1);
    assert_non_null(strstr(err, "not reachable from here"));
}

static void test_transport_names(void **state)
{
    (void)state;
    psb_transport t = PSB_TRANSPORT_TCP;
    assert_int_equal(psb_transport_parse("auto", &t), 0);
    assert_int_equal(t, PSB_TRANSPORT_AUTO);
    assert_int_equal(psb_transport_parse("shm", &t), 0);
    assert_int_equal(t, PSB_TRANSPORT_SHM);
    assert_int_equal(psb_transport_parse("tcp", &t), 0);
    assert_int_equal(t, PSB_TRANSPORT_TCP);
    assert_int_equal(psb_transport_parse("TCP", &t), -1);
    assert_int_equal(psb_transport_parse(NULL, &t), -1);
    assert_string_equal(psb_transport_name(PSB_TRANSPORT_SHM), "shm");
    setenv("PSBENCH_TRANSPORT", "tcp", 1);
    assert_int_equal(psb_transport_default(), PSB_TRANSPORT_TCP);
    setenv("PSBENCH_TRANSPORT", "bogus", 1);
    assert_int_equal(psb_transport_default(), PSB_TRANSPORT_AUTO);
    unsetenv("PSBENCH_TRANSPORT");
    assert_int_equal(psb_transport_default(), PSB_TRANSPORT_AUTO);
    assert_true(shm_default_size() >= 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment_sealed),   cmocka_unit_test(test_segments_refused),
        cmocka_unit_test(test_arena),            cmocka_unit_test(test_arena_many),
        cmocka_unit_test(test_descriptors),      cmocka_unit_test(test_names_and_sockets),
        cmocka_unit_test(test_transport_names),  cmocka_unit_test(test_segment_hugetlb_refused),
        cmocka_unit_test(test_shmem_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
