/* HDF5 checkpoints: see ckpt.h and man/zinf-checkpoint.5. */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "io/file.h"
#include "h5attr.h"
#include "log.h" /* zinf_now */

/* fsync a file or a directory */
int zinf_fsync_path(const char *path, bool dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return zinf_errc(-errno, "%s: %s", path, strerror(errno));
    int rc = fsync(fd) ? zinf_errc(-errno, "fsync %s: %s", path, strerror(errno)) : 0;
    close(fd);
    return rc;
}

/* ZINF_CKPT_FAULT="rank=R,step=S,after=K[,kind=eio|stop]": rank R dies (SIGKILL) after writing K
 * datasets of the save at step S, to test that a save killed midway leaves the previous checkpoint
 * whole; with kind=eio its K-th read or write of a dataset (in the save at step S, or in the load
 * of checkpoint S) fails as an I/O error would, on that rank alone, to test that the other ranks
 * do not wait for it; with kind=stop it stops itself (SIGSTOP) there, a rank that stalls, to test
 * that the others end the job within the collective time limit. */
typedef enum { FAULT_KILL, FAULT_EIO, FAULT_STOP } fault_kind;
static int fault_after(int rank, int64_t step, fault_kind kind)
{
    static const char *const tail[] = {"", ",kind=eio", ",kind=stop"};
    const char *e = getenv("ZINF_CKPT_FAULT");
    int r, k, n = 0;
    long long s;
    if (!e || sscanf(e, "rank=%d,step=%lld,after=%d%n", &r, &s, &k, &n) != 3 || r != rank || s != step) return -1;
    return !strcmp(e + n, tail[kind]) ? k : -1;
}

/* the step of a file name checkpoint-STEP.h5, or -1 */
static long long name_step(const char *n)
{
    long long s;
    char tail[8];
    if (sscanf(n, "checkpoint-%lld%7s", &s, tail) != 2 || strcmp(tail, ".h5") || s < 0) return -1;
    return s;
}

/* the run_id a checkpoint file carries: 0 for format 1 (no run_id) and for a file that does not
 * open; such files are left alone by retention unless this run is itself a format-1 continuation */
static uint64_t file_run_id(const char *path, bool *ok)
{
    zinf_ckf c;
    *ok = zinf_ckf_open(&c, path) == 0;
    uint64_t id = c.a.run_id;
    zinf_ckf_close(&c);
    return id;
}

static void remove_ckpt(const char *dir, long long step)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/checkpoint-%lld.h5", dir, step);
    unlink(p);
    /* and its weights directory (stage3_gather_16bit_weights_on_model_save): the files zinf wrote
     * there, then the directory */
    snprintf(p, sizeof p, "%s/checkpoint-%lld.weights", dir, step);
    DIR *d = opendir(p);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char f[4500];
        snprintf(f, sizeof f, "%s/%s", p, e->d_name);
        unlink(f);
    }
    if (d) closedir(d);
    rmdir(p);
}

/* Retention: of this run's checkpoints (same run_id) older than the one just written, the
 * newest keep - 1 stay; another run's, unreadable ones and later steps (a branch this run
 * resumed before) are never touched. */
static void retain(const char *dir, long long cur, uint64_t run_id, int keep)
{
    DIR *d = opendir(dir);
    if (!d) return;
    long long *steps = NULL;
    int n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        long long s = name_step(e->d_name);
        if (s < 0 || s >= cur) continue;
        char p[4200];
        bool ok;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (file_run_id(p, &ok) != run_id || !ok) continue;
        if (n == cap) {
            long long *ns = realloc(steps, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *ns);
            if (!ns) break;
            steps = ns;
        }
        steps[n++] = s;
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 1; /* the one just written */
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer >= keep) remove_ckpt(dir, steps[i]);
    }
    free(steps);
}

/* Rank 0 after the file is complete: sync it, rename it into place, sync the directory, then
 * point `latest` at it the same way, and apply retention. */
static int commit(const char *dir, const char *tmp, const char *final, const char *base, long long step,
                  uint64_t run_id, int keep)
{
    ZINF_TRY(zinf_fsync_path(tmp, false));
    if (rename(tmp, final)) return zinf_errc(-errno, "rename %s: %s", tmp, strerror(errno));
    ZINF_TRY(zinf_fsync_path(dir, true));
    char lt[4096], lf[4096];
    snprintf(lt, sizeof lt, "%s/latest.tmp", dir);
    snprintf(lf, sizeof lf, "%s/latest", dir);
    FILE *fp = fopen(lt, "w");
    if (!fp) return zinf_errc(-errno, "%s: %s", lt, strerror(errno));
    bool ok = fprintf(fp, "%s\n", base) > 0;
    ok = !fflush(fp) && ok && !fsync(fileno(fp));
    int err = errno;
    if (fclose(fp) || !ok) {
        unlink(lt);
        return zinf_errc(ZINF_EIO, "%s: cannot write: %s (%s stays complete; `latest` names the one before)", lt,
                         strerror(err), final);
    }
    if (rename(lt, lf)) return zinf_errc(-errno, "rename %s: %s", lt, strerror(errno));
    ZINF_TRY(zinf_fsync_path(dir, true));
    if (keep > 0) retain(dir, step, run_id, keep);
    return 0;
}

/* [*a, *b): the part of [lo, lo+len) (unit elements) that falls in tensor tv */
static void clip_to(const zinf_tensor_view *tv, int64_t lo, int64_t len, int64_t *a, int64_t *b)
{
    *a = lo > tv->offset ? lo : tv->offset;
    *b = lo + len < tv->offset + tv->numel ? lo + len : tv->offset + tv->numel;
    if (*b < *a) *b = *a;
}

/* datasets in a checkpoint (master, m, v of each tensor), and the longest part of a unit's states
 * this rank holds */
static int count_datasets(const zinf_model *m, zinf_zero *z, int64_t *maxp)
{
    int n = 0;
    *maxp = 1;
    for (int u = 0; u < m->nunits; u++) {
        int64_t lo, len;
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        *maxp = len > *maxp ? len : *maxp;
        n += 3 * m->units[u].ntensors;
    }
    return n;
}

static int attrs_of(zinf_ckpt_attrs *a, const zinf_ckpt_meta *meta, const zinf_model *m, int world)
{
    memset(a, 0, sizeof *a);
    a->step = meta->step, a->opt_steps = meta->opt_steps, a->seed = meta->seed;
    a->train_batch_size = meta->train_batch_size, a->max_length = meta->max_length, a->run_id = meta->run_id;
    a->consumed_samples = meta->consumed_samples;
    a->loss_scale = meta->ls.cur_scale, a->ls_hysteresis = meta->ls.cur_hysteresis;
    a->ls_iter = meta->ls.cur_iter, a->ls_last_overflow = meta->ls.last_overflow_iter;
    a->saved_world_size = world;
    return zinf_ckpt_attrs_set_model(a, &m->c);
}

/* ---------------------------------------------------------------- isolation ---------------- */
int zinf_ckpt_isolated(int (*fn)(void *ctx, void *out), void *ctx, void *out, size_t out_bytes, double timeout_s,
                       const char *what)
{
    int pfd[2];
    if (pipe(pfd)) return zinf_errc(-errno, "%s: pipe: %s", what, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pfd[0]), close(pfd[1]);
        return zinf_errc(-e, "%s: fork: %s", what, strerror(e));
    }
    if (pid == 0) { /* the child: the work, its status, message and result; no exit handlers */
        close(pfd[0]);
        zinf_ckpt_serial_only();
        int rc = fn(ctx, out);
        fflush(NULL); /* what it printed: _exit flushes nothing */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", rc ? zinf_errmsg() : "");
        const char *parts[3] = {(const char *)&rc, msg, out};
        size_t lens[3] = {sizeof rc, sizeof msg, rc ? 0 : out_bytes};
        for (int i = 0; i < 3; i++)
            for (size_t d = 0; d < lens[i];) {
                ssize_t w = write(pfd[1], parts[i] + d, lens[i] - d);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) _exit(3);
                d += (size_t)w;
            }
        _exit(0);
    }
    close(pfd[1]);
    int crc = 0;
    char msg[1024] = "";
    char *parts[3] = {(char *)&crc, msg, out};
    size_t lens[3] = {sizeof crc, sizeof msg, out_bytes}, got = 0, want = sizeof crc + sizeof msg;
    double t0 = zinf_now();
    bool timed_out = false;
    for (int i = 0; i < 3; i++)
        for (size_t d = 0; d < lens[i];) {
            struct pollfd pf = {.fd = pfd[0], .events = POLLIN};
            int left = timeout_s > 0 ? (int)((timeout_s - (zinf_now() - t0)) * 1000) : -1;
            if (timeout_s > 0 && left <= 0) { timed_out = true; goto done; }
            int pr = poll(&pf, 1, left);
            if (pr < 0 && errno == EINTR) continue;
            if (pr <= 0) { timed_out = pr == 0; goto done; }
            ssize_t n = read(pfd[0], parts[i] + d, lens[i] - d);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) goto done;
            d += (size_t)n, got += (size_t)n;
            if (i == 1 && d == lens[1] && crc) goto done; /* a failure sends no result */
        }
done:
    close(pfd[0]);
    if (timed_out) kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (timed_out) return zinf_errc(ZINF_EIO, "%s: took longer than %.0f s (the file system hangs?)", what, timeout_s);
    if (got >= want && crc) return zinf_errc(crc, "%s", msg);
    if (got < want + (crc ? 0 : out_bytes) || !WIFEXITED(st) || WEXITSTATUS(st))
        return zinf_errc(ZINF_EIO, "%s: the process writing it %s%d (disk full?)", what,
                         WIFSIGNALED(st) ? "died of signal " : "exited with status ",
                         WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    return 0;
}

/* the layout, made in a child process (zinf_ckpt_isolated) */
typedef struct layout_job {
    const char *tmp;
    const zinf_ckpt_attrs *a;
    const char *cfg;
    const zinf_model *m;
    const uint64_t *sums; /* set_sums: the checksums; create: NULL */
    int ndset;
} layout_job;

static int layout_create(void *ctx, void *out)
{
    layout_job *j = ctx;
    int64_t *o = out; /* ndset offsets, then the size */
    return zinf_ckf_create(j->tmp, j->a, j->cfg, j->m, o, &o[j->ndset]);
}

static int layout_sums(void *ctx, void *out)
{
    (void)out;
    layout_job *j = ctx;
    return zinf_ckf_set_sums(j->tmp, j->m, j->sums);
}

/* Rank 0: lay the file out, then reserve each dataset's bytes. posix_fallocate makes the blocks
 * the data will need exist now, so a disk too small fails here with ENOSPC, before any rank
 * writes, instead of inside a write that leaves a file half made. */
static int prepare(const char *tmp, const zinf_ckpt_attrs *a, const char *cfg, const zinf_model *m, int64_t *offs,
                   int ndset, double timeout_s)
{
    layout_job j = {.tmp = tmp, .a = a, .cfg = cfg, .m = m, .ndset = ndset};
    int rc = zinf_ckpt_isolated(layout_create, &j, offs, (size_t)(ndset + 1) * sizeof *offs, timeout_s, tmp);
    if (rc) return rc;
    int fd = open(tmp, O_WRONLY);
    if (fd < 0) return zinf_errc(-errno, "%s: %s", tmp, strerror(errno));
    int di = 0;
    for (int u = 0; u < m->nunits && !rc; u++)
        for (int k = 0; k < 3 && !rc; k++)
            for (int t = 0; t < m->units[u].ntensors && !rc; t++, di++) {
                int e = posix_fallocate(fd, offs[di], m->units[u].t[t].numel * 4);
                if (e == ENOSPC)
                    rc = zinf_errc(-e, "%s: no space left on the device for the checkpoint (%.3g GB): the previous "
                                       "checkpoint and `latest` stay as they were", tmp, (double)zinf_ckpt_bytes(m) / 1e9);
                else if (e)
                    rc = zinf_errc(-e, "%s: cannot reserve the checkpoint's space: %s", tmp, strerror(e));
            }
    if (!rc && fsync(fd)) rc = zinf_errc(-errno, "%s: fsync: %s", tmp, strerror(errno));
    close(fd);
    return rc;
}

static int pwrite_all(int fd, const void *p, size_t n, off_t off)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, (const char *)p + done, n - done, off + (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -ENOSPC;
        done += (size_t)w;
    }
    return 0;
}

/* ---------------------------------------------------------------- save --------------------- */
int zinf_ckpt_save(const char *dir, zinf_comm *comm, const zinf_model *m, zinf_zero *z, const char *cfg_json,
                   const zinf_ckpt_meta *meta, int keep)
{
    char base[64], tmp[4200], final[4150];
    snprintf(base, sizeof base, "checkpoint-%lld.h5", (long long)meta->step);
    snprintf(final, sizeof final, "%s/%s", dir, base);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    int64_t maxp;
    int ndset = count_datasets(m, z, &maxp);
    uint64_t *sums = calloc((size_t)ndset, sizeof *sums);
    int64_t *offs = calloc((size_t)ndset + 1, sizeof *offs);
    float *buf = malloc((size_t)maxp * 4);
    int rc = 0, fd = -1;
    if (!sums || !offs || !buf) rc = zinf_errc(ZINF_ENOMEM, "out of host memory for a checkpoint");
    if (!rc && comm->rank == 0) {
        zinf_ckpt_attrs *a = malloc(sizeof *a);
        rc = !a ? zinf_errc(ZINF_ENOMEM, "out of host memory for a checkpoint") : attrs_of(a, meta, m, comm->size);
        if (!rc) rc = prepare(tmp, a, cfg_json, m, offs, ndset, comm->timeout_s);
        free(a);
    }
    rc = zinf_comm_agree(comm, rc);
    bool agreed = rc != 0;
    if (!rc) rc = zinf_comm_bcast(comm, offs, (size_t)ndset * sizeof *offs, 0);
    if (!rc && (fd = open(tmp, O_WRONLY)) < 0) rc = zinf_errc(-errno, "rank %d: %s: %s", comm->rank, tmp, strerror(errno));
    if (!agreed) rc = zinf_comm_agree(comm, rc);
    agreed = rc != 0;
    /* the tensors: each rank writes its part of each (its writer range) at the dataset's offset;
     * no collective I/O, so a rank whose write fails or stalls holds nobody inside HDF5. The
     * ranks agree after each unit, within the collective time limit. */
    int die = fault_after(comm->rank, meta->step, FAULT_KILL), eio = fault_after(comm->rank, meta->step, FAULT_EIO);
    int stop = fault_after(comm->rank, meta->step, FAULT_STOP), di = 0;
    for (int u = 0; u < m->nunits && !rc; u++) {
        const zinf_unit *un = &m->units[u];
        int64_t lo, len, wlo, wlen;
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        zinf_zero_ckpt_range(z, u, true, &wlo, &wlen);
        for (int k = 0; k < 3 && !rc; k++) {
            rc = zinf_zero_ckpt_get(z, u, (zinf_ckpt_state)k, buf);
            for (int t = 0; t < un->ntensors && !rc; t++, di++) {
                const zinf_tensor_view *tv = &un->t[t];
                int64_t a, b;
                clip_to(tv, wlo, wlen, &a, &b);
                int e = pwrite_all(fd, buf + (a - lo), (size_t)(b - a) * 4, (off_t)(offs[di] + (a - tv->offset) * 4));
                if (e || di + 1 == eio)
                    rc = zinf_errc(ZINF_EIO, "rank %d: %s: cannot write dataset %s/%s: %s", comm->rank, tmp, zinf_ckpt_group[k],
                                   tv->name, strerror(e ? -e : EIO));
                sums[di] = zinf_ckpt_checksum(buf + (a - lo), a - tv->offset, b - a);
                if (die >= 0 && di + 1 == die) raise(SIGKILL);
                if (stop >= 0 && di + 1 == stop) raise(SIGSTOP);
            }
        }
        rc = zinf_comm_agree(comm, rc);
        agreed = rc != 0;
    }
    if (fd >= 0) {
        if (!rc && fsync(fd)) rc = zinf_errc(-errno, "rank %d: %s: fsync: %s", comm->rank, tmp, strerror(errno));
        close(fd);
        if (!agreed) rc = zinf_comm_agree(comm, rc);
        agreed = rc != 0;
    }
    /* the checksums, summed over the ranks, as each dataset's attribute (in place: no new space) */
    if (!rc) rc = zinf_comm_allreduce_sum_u64(comm, sums, ndset);
    if (!rc && comm->rank == 0) {
        layout_job j = {.tmp = tmp, .m = m, .sums = sums, .ndset = ndset};
        rc = zinf_ckpt_isolated(layout_sums, &j, NULL, 0, comm->timeout_s, tmp);
    }
    if (!rc && comm->rank == 0) rc = commit(dir, tmp, final, base, (long long)meta->step, meta->run_id, keep);
    free(sums);
    free(offs);
    free(buf);
    if (!agreed) rc = zinf_comm_agree(comm, rc);
    if (rc && comm->rank == 0) unlink(tmp); /* nothing half-written stays */
    return rc;
}

/* ---------------------------------------------------------------- the directory ------------ */
uint64_t zinf_ckpt_new_run_id(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    h ^= (uint64_t)getpid() << 40;
    for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    h ^= h >> 31;
    h *= 0x7fb5d329728ea185ULL;
    h ^= h >> 27;
    return h ? h : 1;
}

#define LOCK_NAME ".zinf.lock"

void zinf_ckpt_unlock_file(const char *dir)
{
    char lp[4200];
    snprintf(lp, sizeof lp, "%s/" LOCK_NAME, dir);
    unlink(lp);
}

int zinf_ckpt_lock_dir(const char *dir, double wait_s, int *fdp, void (*removed)(const char *path))
{
    char lp[4200];
    snprintf(lp, sizeof lp, "%s/" LOCK_NAME, dir);
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return zinf_errc(-errno, "--out %s: cannot create %s: %s", dir, lp, strerror(errno));
    double t0 = zinf_now();
    while (flock(fd, LOCK_EX | LOCK_NB)) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            int e = errno;
            close(fd);
            return zinf_errc(-e, "--out %s: cannot lock %s: %s", dir, lp, strerror(e));
        }
        if (zinf_now() - t0 >= wait_s) {
            char who[256] = "";
            ssize_t n = pread(fd, who, sizeof who - 1, 0);
            who[n > 0 ? n : 0] = 0;
            who[strcspn(who, "\n")] = 0;
            close(fd);
            return zinf_errc(ZINF_EINVAL, "--out %s: another zinf run is using this directory (%s); waited %.0f s for "
                                          "it to end", dir, who[0] ? who : "its lock is held", wait_s);
        }
        struct timespec ms100 = {0, 100000000};
        nanosleep(&ms100, NULL);
    }
    /* who holds it, for the message the next run gets */
    char host[256] = "", who[400];
    gethostname(host, sizeof host - 1);
    int n = snprintf(who, sizeof who, "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, who, (size_t)n, 0) < 0) { /* only informative */ }
    /* what an interrupted save left: this run holds the directory, so no save of another is under way */
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        long long s;
        char tail[16];
        bool stale = !strcmp(e->d_name, "latest.tmp") ||
                     (sscanf(e->d_name, "checkpoint-%lld%15s", &s, tail) == 2 && !strcmp(tail, ".h5.tmp"));
        if (!stale) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (!unlink(p) && removed) removed(p);
    }
    if (d) closedir(d);
    *fdp = fd;
    return 0;
}

/* ---------------------------------------------------------------- resolve ------------------ */
static bool is_file(const char *p)
{
    return access(p, R_OK) == 0;
}

/* the checkpoint `latest` names, else the newest checkpoint-STEP.h5 in dir ("" if none) */
void zinf_ckpt_newest(const char *dir, char *path, size_t cap)
{
    path[0] = 0;
    char lf[4096], line[256] = "";
    snprintf(lf, sizeof lf, "%s/latest", dir);
    FILE *fp = zinf_refuse_irregular(NULL, lf) ? NULL : fopen(lf, "r"); /* a FIFO would block */
    if (fp) {
        if (fgets(line, sizeof line, fp)) line[strcspn(line, "\n")] = 0;
        fclose(fp);
        snprintf(path, cap, "%s/%s", dir, line);
        if (line[0] && name_step(line) >= 0 && is_file(path)) return;
        path[0] = 0;
    }
    /* no usable `latest`: the newest complete file (a .tmp never is one) */
    DIR *d = opendir(dir);
    if (!d) return;
    /* the file itself, by its own name (checkpoint-0010.h5 is step 10 too); of two names of one
     * step, the one zinf writes */
    long long best = -1;
    char name[256] = "";
    for (struct dirent *e; (e = readdir(d));) {
        long long s = name_step(e->d_name);
        char canon[64];
        snprintf(canon, sizeof canon, "checkpoint-%lld.h5", s);
        if (s > best || (s == best && s >= 0 && !strcmp(e->d_name, canon))) {
            best = s;
            snprintf(name, sizeof name, "%s", e->d_name);
        }
    }
    closedir(d);
    if (best >= 0) snprintf(path, cap, "%s/%s", dir, name);
}

int zinf_ckpt_resolve(const char *spec, const char *dir, char *path, size_t cap)
{
    path[0] = 0;
    if (!spec || !*spec) return 0;
    if (!strcmp(spec, "auto")) {
        zinf_ckpt_newest(dir, path, cap);
        return 0;
    }
    DIR *d = opendir(spec);
    if (d) {
        closedir(d);
        zinf_ckpt_newest(spec, path, cap);
        if (!path[0]) return zinf_errc(ZINF_EINVAL, "--resume %s: no checkpoint in this directory", spec);
        return 0;
    }
    if (!is_file(spec)) return zinf_errc(-errno, "--resume %s: %s", spec, strerror(errno));
    snprintf(path, cap, "%s", spec);
    return 0;
}

char *zinf_ckpt_stored_config(const char *path)
{
    zinf_ckf c;
    char *text = zinf_ckf_open(&c, path) ? NULL : zinf_ckf_config(&c);
    zinf_ckf_close(&c);
    return text;
}

/* ---------------------------------------------------------------- load --------------------- */
int zinf_ckpt_load(const char *path, zinf_comm *comm, const zinf_model *m, zinf_zero *z, zinf_ckpt_meta *meta)
{
    memset(meta, 0, sizeof *meta);
    zinf_ckf c;
    int rc = zinf_ckf_open(&c, path);
    /* the model must be the one the checkpoint holds */
    const zinf_ckpt_attrs *a = &c.a;
    if (!rc) rc = zinf_ckpt_attrs_check_model(a, &m->c, path);
    if (!rc) rc = zinf_ckf_no_extra(&c, m);
    meta->step = a->step, meta->opt_steps = a->opt_steps, meta->seed = a->seed;
    meta->train_batch_size = a->train_batch_size, meta->max_length = a->max_length, meta->run_id = a->run_id;
    meta->consumed_samples = a->consumed_samples;
    meta->ls.cur_scale = a->loss_scale, meta->ls.cur_hysteresis = a->ls_hysteresis;
    meta->ls.cur_iter = a->ls_iter, meta->ls.last_overflow_iter = a->ls_last_overflow;
    int64_t maxp;
    int ndset = count_datasets(m, z, &maxp);
    uint64_t *sums = calloc((size_t)ndset, sizeof *sums), *want = calloc((size_t)ndset, sizeof *want);
    float *buf = malloc((size_t)maxp * 3 * 4);
    if (!rc && (!sums || !want || !buf)) rc = zinf_errc(ZINF_ENOMEM, "out of host memory for a checkpoint");
    /* Each rank reads its own ranges with serial HDF5: no rank waits inside HDF5 for another.
     * The ranks agree after each unit, within the collective time limit; an error agreed on is
     * printed once, by the first rank that had it. */
    int di = 0, eio = fault_after(comm->rank, a->step, FAULT_EIO), stop = fault_after(comm->rank, a->step, FAULT_STOP);
    rc = zinf_comm_agree(comm, rc);
    for (int u = 0; u < m->nunits && !rc; u++) {
        const zinf_unit *un = &m->units[u];
        int64_t lo, len, wlo, wlen;
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        zinf_zero_ckpt_range(z, u, true, &wlo, &wlen);
        for (int k = 0; k < 3 && !rc; k++) {
            float *bk = buf + (size_t)k * maxp;
            for (int t = 0; t < un->ntensors && !rc; t++, di++) {
                const zinf_tensor_view *tv = &un->t[t];
                int64_t ta, tb;
                clip_to(tv, lo, len, &ta, &tb);
                hid_t d;
                rc = zinf_ckf_tensor(&c, k, tv, &d, &want[di]);
                if (rc) break;
                rc = zinf_ckf_read(&c, k, d, tv, ta - tv->offset, tb - tv->offset, bk + (ta - lo));
                H5Dclose(d);
                if (stop >= 0 && di + 1 == stop) raise(SIGSTOP);
                if (!rc && di + 1 == eio)
                    rc = zinf_errc(ZINF_EIO, "rank %d: %s: cannot read dataset %s/%s (truncated file?)", comm->rank, path, zinf_ckpt_group[k],
                                   tv->name);
                /* this rank's share of the checksum: its writer range */
                int64_t wa = wlo > ta ? wlo : ta, wb = wlo + wlen < tb ? wlo + wlen : tb;
                if (!rc && wb > wa) sums[di] = zinf_ckpt_checksum(bk + (wa - lo), wa - tv->offset, wb - wa);
            }
        }
        for (int k = 0; k < 3 && !rc; k++) rc = zinf_zero_ckpt_set(z, u, (zinf_ckpt_state)k, buf + (size_t)k * maxp);
        rc = zinf_comm_agree(comm, rc);
    }
    zinf_ckf_close(&c);
    free(buf);
    if (rc) { /* agreed on, and printed, above */
        free(sums);
        free(want);
        return rc;
    }
    rc = zinf_comm_allreduce_sum_u64(comm, sums, ndset);
    di = 0;
    for (int u = 0; u < m->nunits && !rc; u++)
        for (int k = 0; k < 3 && !rc; k++)
            for (int t = 0; t < m->units[u].ntensors && !rc; t++, di++)
                if (sums[di] != want[di])
                    rc = zinf_errc(ZINF_EINVAL, "%s: dataset %s/%s: checksum mismatch (the file is corrupted)", path,
                                   zinf_ckpt_group[k], m->units[u].t[t].name);
    free(sums);
    free(want);
    if (!rc) rc = zinf_zero_ckpt_params_from_master(z);
    return zinf_comm_agree(comm, rc);
}
