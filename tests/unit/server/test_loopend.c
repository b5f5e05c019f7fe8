/* test_loopend.c — the reactor's end-of-iteration pass (server/loopend.c)
 * on a real libevent loop: it runs once per iteration however often it is
 * asked for, after every callback the iteration's poll made active, and
 * before the next poll's callbacks; a want from inside the pass runs it
 * again in the same iteration.
 *
 * Sockets a and b are readable before the loop starts; a's callback makes
 * c readable, which only the next poll sees. The server's pass must have
 * written a's and b's answers by then — one write per connection per
 * iteration.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/loopend.h"

typedef struct fixture {
    struct event_base *base;
    loopend pass;
    int sp[3][2]; /* socketpairs a, b, c: [0] is watched, [1] is written */
    struct event *ev[3];
    char order[32]; /* callbacks in the order they ran: a b c, and P for the pass */
    size_t norder;
    int want_again; /* the pass asks for itself this many more times */
} fixture;

static void fx_note(fixture *x, char what)
{
    assert_true(x->norder + 1 < sizeof x->order);
    x->order[x->norder++] = what;
    x->order[x->norder] = 0;
}

static void on_pass(void *arg)
{
    fixture *x = arg;
    fx_note(x, 'P');
    if (x->want_again > 0) {
        x->want_again--;
        loopend_want(&x->pass);
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    fixture *x = arg;
    char buf[8];
    assert_true(read(fd, buf, sizeof buf) > 0);
    int i = fd == x->sp[0][0] ? 0 : fd == x->sp[1][0] ? 1 : 2;
    fx_note(x, (char)('a' + i));
    /* Every callback asks: the pass still runs once. */
    loopend_want(&x->pass);
    loopend_want(&x->pass);
    if (i == 0)
        assert_int_equal(write(x->sp[2][1], "c", 1), 1); /* seen by the next poll */
    if (i == 2)
        event_base_loopbreak(x->base);
}

static void loop_open(fixture *x)
{
    memset(x, 0, sizeof *x);
    x->base = event_base_new();
    assert_non_null(x->base);
    assert_int_equal(loopend_init(&x->pass, x->base, on_pass, x), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, x->sp[i]), 0);
        x->ev[i] = event_new(x->base, x->sp[i][0], EV_READ | EV_PERSIST, on_read, x);
        assert_non_null(x->ev[i]);
        assert_int_equal(event_add(x->ev[i], NULL), 0);
    }
}

static void loop_close(fixture *x)
{
    for (int i = 0; i < 3; i++) {
        event_free(x->ev[i]);
        close(x->sp[i][0]);
        close(x->sp[i][1]);
    }
    loopend_free(&x->pass);
    event_base_free(x->base);
}

/* a and b in either order (the poll's), then the pass, then c, then the
 * pass again. */
static void assert_order(const fixture *x, const char *tail)
{
    char ab[32], ba[32];
    snprintf(ab, sizeof ab, "ab%s", tail);
    snprintf(ba, sizeof ba, "ba%s", tail);
    if (strcmp(x->order, ab) != 0 && strcmp(x->order, ba) != 0)
        fail_msg("callbacks ran as \"%s\", want \"%s\" or \"%s\"", x->order, ab, ba);
}

static void test_pass_ends_the_iteration(void **state)
{
    (void)state;
    fixture x;
    loop_open(&x);
    assert_int_equal(write(x.sp[0][1], "a", 1), 1);
    assert_int_equal(write(x.sp[1][1], "b", 1), 1);
    assert_int_equal(event_base_dispatch(x.base), 0);
    /* The loop broke inside c's callback; the pass c asked for is still
     * active, and runs on the next turn of the loop. */
    assert_order(&x, "Pc");
    event_base_loop(x.base, EVLOOP_NONBLOCK);
    assert_order(&x, "PcP");
    assert_false(x.pass.armed);
    loop_close(&x);
}

static void test_want_from_the_pass_runs_it_again(void **state)
{
    (void)state;
    fixture x;
    loop_open(&x);
    x.want_again = 2;
    assert_int_equal(write(x.sp[0][1], "a", 1), 1);
    assert_int_equal(write(x.sp[1][1], "b", 1), 1);
    assert_int_equal(event_base_dispatch(x.base), 0);
    /* Three passes before the next poll: the wants made inside the pass
     * were not lost, nor left for a later iteration. */
    assert_order(&x, "PPPc");
    loop_close(&x);
}

static void test_want_without_io(void **state)
{
    (void)state;
    fixture x;
    loop_open(&x);
    /* Asked for outside any callback (before the loop runs): the next
     * iteration runs it, without waiting for I/O. */
    loopend_want(&x.pass);
    assert_true(x.pass.armed);
    event_base_loop(x.base, EVLOOP_NONBLOCK);
    assert_string_equal(x.order, "P");
    assert_false(x.pass.armed);
    /* Freed while armed: it never runs. */
    loopend_want(&x.pass);
    loopend_free(&x.pass);
    event_base_loop(x.base, EVLOOP_NONBLOCK);
    assert_string_equal(x.order, "P");
    loopend_free(&x.pass); /* twice is harmless */
    loop_close(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_ends_the_iteration),
        cmocka_unit_test(test_want_from_the_pass_runs_it_again),
        cmocka_unit_test(test_want_without_io),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
