/* test_progress: the compact durations of the step log line at every unit boundary and its
 * rounding carries, and the time-left estimate: the warm-up step left out, the exponential
 * average following a change of speed, evaluations and saves counted per occurrence. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "progress.h"

static void dur(double s, const char *want)
{
    char buf[16];
    zinf_fmt_duration(s, buf, sizeof buf);
    CHECK(!strcmp(buf, want), "%.3f s: got '%s', want '%s'", s, buf, want);
}

static void durations(void)
{
    dur(0, "0s");
    dur(0.4, "0s");
    dur(0.5, "1s"); /* llround: halves away from zero */
    dur(45, "45s");
    dur(59.4, "59s");
    dur(59.5, "1m00s"); /* rounds up into the next unit */
    dur(60, "1m00s");
    dur(187, "3m07s");
    dur(3599.4, "59m59s");
    dur(3599.5, "1h00m");
    dur(7500, "2h05m");
    dur(7529, "2h05m");
    dur(7530, "2h06m"); /* 2h05m30s rounds to the minute */
    dur(86369, "23h59m");
    dur(86370, "1d00h");
    dur(3 * 86400 + 4 * 3600, "3d04h");
    dur(3 * 86400 + 4 * 3600 + 1799, "3d04h");
    dur(3 * 86400 + 4 * 3600 + 1800, "3d05h");
    dur(9999.0 * 86400 + 23 * 3600, "9999d23h");
    dur(1e7 * 86400, ">9999d");
    dur(-1, "?");
    dur(NAN, "?");
    dur(INFINITY, "?");
    /* a small buffer is cut, never overrun */
    char small[4] = "xxx";
    zinf_fmt_duration(187, small, 3);
    CHECK(!strcmp(small, "3m"), "cut to 3 bytes: got '%s'", small);
}

static void events(void)
{
    /* evaluations every 10 steps of 35: at 10, 20, 30 and the last, 35 */
    CHECK(zinf_progress_events_left(0, 35, 10) == 4, "0 of 35 every 10");
    CHECK(zinf_progress_events_left(10, 35, 10) == 3, "10 of 35 every 10");
    CHECK(zinf_progress_events_left(31, 35, 10) == 1, "31 of 35 every 10");
    CHECK(zinf_progress_events_left(35, 35, 10) == 0, "35 of 35 every 10");
    CHECK(zinf_progress_events_left(0, 40, 10) == 4, "the last step is a multiple: counted once");
    CHECK(zinf_progress_events_left(39, 40, 10) == 1, "39 of 40 every 10");
    CHECK(zinf_progress_events_left(5, 40, 0) == 0, "every 0: none");
}

static void eta(void)
{
    zinf_progress p;
    zinf_progress_init(&p);
    CHECK(zinf_progress_eta(&p, 100, 5, 5) == 0, "nothing timed: 0");
    /* the warm-up step stands for the step time while it is the only one */
    zinf_progress_add(&p, ZINF_PROG_STEP, 5.0);
    CHECK_CLOSE(zinf_progress_eta(&p, 10, 0, 0), 50.0, 1e-12, 0, "warm-up only");
    /* then it is forgotten: nine steps of 1 s give exactly 1 s per step */
    for (int i = 0; i < 9; i++) zinf_progress_add(&p, ZINF_PROG_STEP, 1.0);
    CHECK_CLOSE(zinf_progress_eta(&p, 10, 0, 0), 10.0, 1e-12, 0, "warm-up left out");
    CHECK(zinf_progress_eta(&p, 0, 0, 0) == 0, "no steps left: 0");
    CHECK(zinf_progress_eta(&p, -3, -1, -1) == 0, "negative counts are none");
    /* a plain mean up to 1/alpha steps: 1 s x 9, then 11 steps of 3 s -> (9 + 33) / 20 */
    for (int i = 0; i < 11; i++) zinf_progress_add(&p, ZINF_PROG_STEP, 3.0);
    CHECK_CLOSE(zinf_progress_eta(&p, 1, 0, 0), 42.0 / 20.0, 1e-12, 0, "plain mean of the first 20");
    /* past that, exponential: after k more steps of 3 s, 3 - (3 - m) (1 - alpha)^k */
    double m = 42.0 / 20.0;
    for (int i = 0; i < 40; i++) zinf_progress_add(&p, ZINF_PROG_STEP, 3.0);
    double want = 3.0 - (3.0 - m) * pow(1.0 - ZINF_PROGRESS_ALPHA, 40);
    CHECK_CLOSE(zinf_progress_eta(&p, 1, 0, 0), want, 1e-12, 0, "exponential average");
    CHECK(want > 2.85, "the average has followed the new speed (%.4f)", want);
    /* one slow step moves the estimate by alpha of the difference, not by its whole size */
    double before = zinf_progress_eta(&p, 1, 0, 0);
    zinf_progress_add(&p, ZINF_PROG_STEP, 30.0);
    CHECK_CLOSE(zinf_progress_eta(&p, 1, 0, 0), before + ZINF_PROGRESS_ALPHA * (30.0 - before), 1e-12, 0,
                "one outlier");
    /* evaluations and saves: their own plain means, once per occurrence still due */
    zinf_progress q;
    zinf_progress_init(&q);
    zinf_progress_add(&q, ZINF_PROG_STEP, 9.0);
    zinf_progress_add(&q, ZINF_PROG_STEP, 2.0);
    zinf_progress_add(&q, ZINF_PROG_EVAL, 4.0);
    zinf_progress_add(&q, ZINF_PROG_EVAL, 6.0);
    zinf_progress_add(&q, ZINF_PROG_SAVE, 1.5);
    CHECK_CLOSE(zinf_progress_eta(&q, 10, 3, 2), 10 * 2.0 + 3 * 5.0 + 2 * 1.5, 1e-12, 0, "steps, evals, saves");
    /* a time that is not one is ignored */
    zinf_progress_add(&q, ZINF_PROG_EVAL, NAN);
    zinf_progress_add(&q, ZINF_PROG_EVAL, -1);
    CHECK_CLOSE(zinf_progress_eta(&q, 0, 1, 0), 5.0, 1e-12, 0, "NaN and negative times ignored");
}

int main(void)
{
    durations();
    events();
    eta();
    return check_done("test_progress");
}
