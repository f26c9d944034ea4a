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
#include <unistd.h>

#include "err.h"
#include "h5attr.h"
#include "zinf-build.h" /* PACKAGE_VERSION */

static const char *const state_group[3] = {"/master", "/optim/m", "/optim/v"};

/* ---------------------------------------------------------------- checksum ----------------- */
static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t zinf_ckpt_checksum(const float *x, int64_t first, int64_t n)
{
    uint64_t s = 0;
    /* a sum modulo 2^64: any split over threads gives the same value */
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        s += mix64(((uint64_t)(first + i) << 32) ^ b ^ 0x9e3779b97f4a7c15ULL);
    }
    return s;
}

/* ---------------------------------------------------------------- HDF5 helpers ------------- */
/* [a, b) of a tensor's flat elements as a hyperslab selection of its dataset: a partial first
 * row, whole rows, a partial last row (one run for a vector). */
static int select_flat(hid_t space, const zinf_tensor_view *t, int64_t a, int64_t b)
{
    if (a >= b) return H5Sselect_none(space) < 0 ? -1 : 0;
    if (!t->shape[1]) {
        hsize_t st = (hsize_t)a, cnt = (hsize_t)(b - a);
        return H5Sselect_hyperslab(space, H5S_SELECT_SET, &st, NULL, &cnt, NULL) < 0 ? -1 : 0;
    }
    int64_t C = t->shape[1];
    H5S_seloper_t op = H5S_SELECT_SET;
    while (a < b) {
        int64_t r = a / C, c = a % C;
        hsize_t st[2], cnt[2];
        if (c || b - a < C) { /* part of one row */
            int64_t e = b < (r + 1) * C ? b : (r + 1) * C;
            st[0] = (hsize_t)r, st[1] = (hsize_t)c, cnt[0] = 1, cnt[1] = (hsize_t)(e - a);
            a = e;
        } else { /* whole rows */
            int64_t rows = (b - a) / C;
            st[0] = (hsize_t)r, st[1] = 0, cnt[0] = (hsize_t)rows, cnt[1] = (hsize_t)C;
            a += rows * C;
        }
        if (H5Sselect_hyperslab(space, op, st, NULL, cnt, NULL) < 0) return -1;
        op = H5S_SELECT_OR;
    }
    return 0;
}

static hid_t file_space(const zinf_tensor_view *t)
{
    hsize_t dims[2] = {(hsize_t)t->shape[0], (hsize_t)t->shape[1]};
    return H5Screate_simple(t->shape[1] ? 2 : 1, dims, NULL);
}

/* a string dataset (no size limit, unlike an attribute) */
static int write_text(hid_t f, const char *name, const char *text)
{
    hid_t ty = H5Tcopy(H5T_C_S1);
    H5Tset_size(ty, strlen(text) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(f, name, ty, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = d < 0 ? -1 : 0;
    if (d >= 0) {
        hid_t dx = H5Pcreate(H5P_DATASET_XFER);
        H5Pset_dxpl_mpio(dx, H5FD_MPIO_COLLECTIVE);
        if (H5Dwrite(d, ty, H5S_ALL, H5S_ALL, dx, text) < 0) rc = -1;
        H5Pclose(dx);
        H5Dclose(d);
    }
    H5Sclose(sp);
    H5Tclose(ty);
    return rc;
}

static hid_t mpio_fapl(zinf_comm *comm)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, comm->world, MPI_INFO_NULL);
    H5Pset_alignment(fapl, 1 << 20, 1 << 20); /* datasets of 1 MiB or more start on 1 MiB bounds */
    return fapl;
}

int zinf_fsync_path(const char *path, bool dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return zinf_errc(-errno, "%s: %s", path, strerror(errno));
    int rc = fsync(fd) ? zinf_errc(-errno, "fsync %s: %s", path, strerror(errno)) : 0;
    close(fd);
    return rc;
}

/* ZINF_CKPT_FAULT="rank=R,step=S,after=K[,kind=eio]": rank R dies (SIGKILL) after writing K
 * datasets of the save at step S, to test that a save killed midway leaves the previous checkpoint
 * whole; with kind=eio its K-th read or write of a dataset (in the save at step S, or in the load
 * of checkpoint S) fails as an I/O error would, on that rank alone, to test that the other ranks
 * do not wait for it in the next collective. */
static int fault_after(int rank, int64_t step, bool eio)
{
    const char *e = getenv("ZINF_CKPT_FAULT");
    int r, k, n = 0;
    long long s;
    if (!e || sscanf(e, "rank=%d,step=%lld,after=%d%n", &r, &s, &k, &n) != 3 || r != rank || s != step) return -1;
    return !strcmp(e + n, eio ? ",kind=eio" : "") ? k : -1;
}

/* the step of a file name checkpoint-STEP.h5, or -1 */
static long long name_step(const char *n)
{
    long long s;
    char tail[8];
    if (sscanf(n, "checkpoint-%lld%7s", &s, tail) != 2 || strcmp(tail, ".h5") || s < 0) return -1;
    return s;
}

/* Rank 0 after the file is complete: sync it, rename it into place, sync the directory, then
 * point `latest` at it the same way, and drop checkpoints beyond the newest `keep`. */
static int commit(const char *dir, const char *tmp, const char *final, const char *base, int keep)
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
    if (fclose(fp) || !ok) return zinf_errc(ZINF_EIO, "%s: cannot write: %s", lt, strerror(errno));
    if (rename(lt, lf)) return zinf_errc(-errno, "rename %s: %s", lt, strerror(errno));
    ZINF_TRY(zinf_fsync_path(dir, true));
    if (keep <= 0) return 0;
    /* retention: the newest `keep` complete checkpoints stay */
    DIR *d = opendir(dir);
    if (!d) return 0;
    long long steps[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;) {
        long long s = name_step(e->d_name);
        if (s >= 0) steps[n++] = s;
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer >= keep) {
            char p[4200];
            snprintf(p, sizeof p, "%s/checkpoint-%lld.h5", dir, steps[i]);
            unlink(p);
            /* and its 16-bit weights (stage3_gather_16bit_weights_on_model_save), if any */
            snprintf(p, sizeof p, "%s/checkpoint-%lld.weights/weights.h5", dir, steps[i]);
            unlink(p);
            snprintf(p, sizeof p, "%s/checkpoint-%lld.weights", dir, steps[i]);
            rmdir(p);
        }
    }
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

/* ---------------------------------------------------------------- save --------------------- */
int zinf_ckpt_save(const char *dir, zinf_comm *comm, const zinf_model *m, zinf_zero *z, const char *cfg_json,
                   const zinf_ckpt_meta *meta, int keep)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors become one message, not HDF5's stack dump */
    char base[64], tmp[4200], final[4150];
    snprintf(base, sizeof base, "checkpoint-%lld.h5", (long long)meta->step);
    snprintf(final, sizeof final, "%s/%s", dir, base);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    int64_t maxp;
    int ndset = count_datasets(m, z, &maxp);
    uint64_t *sums = calloc((size_t)ndset, sizeof *sums);
    float *buf = malloc((size_t)maxp * 4);
    hid_t fapl = mpio_fapl(comm);
    hid_t f = sums && buf ? H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl) : -1;
    H5Pclose(fapl);
    int rc = 0;
    if (!sums || !buf) rc = zinf_errc(ZINF_ENOMEM, "out of host memory for a checkpoint");
    else if (f < 0) rc = zinf_errc(ZINF_EIO, "%s: cannot create the checkpoint file (is the directory writable?)", tmp);
    hid_t dx = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dx, H5FD_MPIO_COLLECTIVE);
    /* the run's scalars: root attributes */
    if (!rc) {
        const zinf_model_cfg *mc = &m->c;
        int e = zinf_h5_attr_i64(f, "format_version", ZINF_CKPT_FORMAT) | zinf_h5_attr_str(f, "zinf_version", PACKAGE_VERSION) |
                zinf_h5_attr_i64(f, "step", meta->step) | zinf_h5_attr_i64(f, "opt_steps", meta->opt_steps) |
                zinf_h5_attr_u64(f, "seed", meta->seed) | zinf_h5_attr_i64(f, "train_batch_size", meta->train_batch_size) |
                zinf_h5_attr_f64(f, "loss_scale", meta->ls.cur_scale) |
                zinf_h5_attr_i64(f, "loss_scale_hysteresis", meta->ls.cur_hysteresis) |
                zinf_h5_attr_i64(f, "loss_scale_iter", meta->ls.cur_iter) |
                zinf_h5_attr_i64(f, "loss_scale_last_overflow_iter", meta->ls.last_overflow_iter) |
                zinf_h5_attr_i64(f, "n_layer", mc->n_layer) | zinf_h5_attr_i64(f, "n_embd", mc->n_embd) |
                zinf_h5_attr_i64(f, "n_head", mc->n_head) | zinf_h5_attr_i64(f, "vocab_size", mc->vocab_size) |
                zinf_h5_attr_i64(f, "padded_vocab", mc->padded_vocab) | zinf_h5_attr_i64(f, "n_positions", mc->n_positions) |
                zinf_h5_attr_i64(f, "saved_world_size", comm->size);
        hid_t g = H5Gcreate2(f, "/meta", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g >= 0) H5Gclose(g);
        e |= g < 0 || write_text(f, "/meta/config", cfg_json ? cfg_json : "{}");
        const char *groups[] = {"/master", "/optim", "/optim/m", "/optim/v"};
        for (int i = 0; i < 4; i++) {
            hid_t gg = H5Gcreate2(f, groups[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            e |= gg < 0;
            if (gg >= 0) H5Gclose(gg);
        }
        if (e) rc = zinf_errc(ZINF_EIO, "%s: cannot write the checkpoint's attributes", tmp);
    }
    /* the tensors: each rank writes its part of each (its writer range), unit by unit. The ranks
     * agree on every dataset's outcome before the next collective call: a write that fails on one
     * rank alone (its disk, its node's mount) must not leave the others waiting in that call. */
    int die = fault_after(comm->rank, meta->step, false), eio = fault_after(comm->rank, meta->step, true), di = 0;
    rc = zinf_comm_agree(comm, rc);
    bool agreed = rc != 0;
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
                char name[128];
                snprintf(name, sizeof name, "%s/%s", state_group[k], tv->name);
                hid_t fs = file_space(tv);
                hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
                hsize_t cnt = (hsize_t)(b - a);
                hid_t ms = H5Screate_simple(1, &cnt, NULL);
                if (b == a) H5Sselect_none(ms);
                if (d < 0 || select_flat(fs, tv, a - tv->offset, b - tv->offset) ||
                    H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, dx, buf + (a - lo)) < 0 || di + 1 == eio)
                    rc = zinf_errc(ZINF_EIO, "rank %d: %s: cannot write dataset %s (disk full?)", comm->rank, tmp, name);
                sums[di] = zinf_ckpt_checksum(buf + (a - lo), a - tv->offset, b - a);
                H5Sclose(ms);
                H5Sclose(fs);
                if (d >= 0) H5Dclose(d);
                if (die >= 0 && di + 1 == die) raise(SIGKILL);
                rc = zinf_comm_agree(comm, rc);
                agreed = rc != 0;
            }
        }
    }
    /* the checksums, summed over the ranks, as each dataset's attribute */
    if (!rc && MPI_Allreduce(MPI_IN_PLACE, sums, ndset, MPI_UINT64_T, MPI_SUM, comm->world) != MPI_SUCCESS)
        rc = zinf_errc(ZINF_ECOMM, "checkpoint: the checksums' all-reduce failed");
    di = 0;
    for (int u = 0; u < m->nunits && !rc; u++)
        for (int k = 0; k < 3 && !rc; k++)
            for (int t = 0; t < m->units[u].ntensors && !rc; t++, di++) {
                char name[128];
                snprintf(name, sizeof name, "%s/%s", state_group[k], m->units[u].t[t].name);
                hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
                /* where the tensor sits in the model: its unit and its element offset there */
                if (d < 0 || zinf_h5_attr_u64(d, "checksum", sums[di]) || zinf_h5_attr_i64(d, "unit_index", u) ||
                    zinf_h5_attr_i64(d, "unit_offset", m->units[u].t[t].offset))
                    rc = zinf_errc(ZINF_EIO, "%s: cannot write the checksum of %s", tmp, name);
                if (d >= 0) H5Dclose(d);
            }
    H5Pclose(dx);
    if (f >= 0 && H5Fclose(f) < 0 && !rc) rc = zinf_errc(ZINF_EIO, "%s: cannot complete the file (disk full?)", tmp);
    free(sums);
    free(buf);
    /* an error agreed on above was printed once already; one found since is agreed on here */
    if (!agreed) rc = zinf_comm_agree(comm, rc);
    agreed = agreed || rc;
    if (!rc && comm->rank == 0) rc = commit(dir, tmp, final, base, keep);
    if (rc && comm->rank == 0) unlink(tmp); /* nothing half-written stays */
    return agreed ? rc : zinf_comm_agree(comm, rc);
}

/* ---------------------------------------------------------------- resolve ------------------ */
static bool is_file(const char *p)
{
    return access(p, R_OK) == 0;
}

/* the newest checkpoint-STEP.h5 in dir ("" if none) */
static void newest(const char *dir, char *path, size_t cap)
{
    path[0] = 0;
    char lf[4096], line[256] = "";
    snprintf(lf, sizeof lf, "%s/latest", dir);
    FILE *fp = fopen(lf, "r");
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
    long long best = -1;
    for (struct dirent *e; (e = readdir(d));) {
        long long s = name_step(e->d_name);
        if (s > best) best = s;
    }
    closedir(d);
    if (best >= 0) snprintf(path, cap, "%s/checkpoint-%lld.h5", dir, best);
}

int zinf_ckpt_resolve(const char *spec, const char *dir, char *path, size_t cap)
{
    path[0] = 0;
    if (!spec || !*spec) return 0;
    if (!strcmp(spec, "auto")) {
        newest(dir, path, cap);
        return 0;
    }
    DIR *d = opendir(spec);
    if (d) {
        closedir(d);
        newest(spec, path, cap);
        if (!path[0]) return zinf_errc(ZINF_EINVAL, "--resume %s: no checkpoint in this directory", spec);
        return 0;
    }
    if (!is_file(spec)) return zinf_errc(-errno, "--resume %s: %s", spec, strerror(errno));
    snprintf(path, cap, "%s", spec);
    return 0;
}

/* ---------------------------------------------------------------- load --------------------- */
int zinf_ckpt_load(const char *path, zinf_comm *comm, const zinf_model *m, zinf_zero *z, zinf_ckpt_meta *meta)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fapl = mpio_fapl(comm);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0)
        return zinf_comm_agree(comm, zinf_errc(ZINF_EIO, "%s: not a readable HDF5 file (truncated or not a "
                                                         "checkpoint)", path));
    int rc = 0;
    int64_t fmt = -1;
    if (zinf_h5_get_num(f, "format_version", H5T_NATIVE_INT64, &fmt) || fmt != ZINF_CKPT_FORMAT)
        rc = zinf_errc(ZINF_EINVAL, "%s: checkpoint format %lld, this zinf reads format %d", path, (long long)fmt,
                       ZINF_CKPT_FORMAT);
    /* the model must be the one the checkpoint holds */
    const zinf_model_cfg *mc = &m->c;
    struct { const char *name; int64_t want; } shape[] = {
        {"n_layer", mc->n_layer}, {"n_embd", mc->n_embd}, {"n_head", mc->n_head},
        {"vocab_size", mc->vocab_size}, {"padded_vocab", mc->padded_vocab}, {"n_positions", mc->n_positions}};
    for (size_t i = 0; i < sizeof shape / sizeof *shape && !rc; i++) {
        int64_t v = -1;
        if (zinf_h5_get_num(f, shape[i].name, H5T_NATIVE_INT64, &v))
            rc = zinf_errc(ZINF_EINVAL, "%s: attribute %s is missing", path, shape[i].name);
        else if (v != shape[i].want)
            rc = zinf_errc(ZINF_EINVAL, "%s: the checkpoint's model has %s %lld, this run's %lld", path, shape[i].name,
                           (long long)v, (long long)shape[i].want);
    }
    memset(meta, 0, sizeof *meta);
    if (!rc && (zinf_h5_get_num(f, "step", H5T_NATIVE_INT64, &meta->step) ||
                zinf_h5_get_num(f, "opt_steps", H5T_NATIVE_INT64, &meta->opt_steps) ||
                zinf_h5_get_num(f, "seed", H5T_NATIVE_UINT64, &meta->seed) ||
                zinf_h5_get_num(f, "train_batch_size", H5T_NATIVE_INT64, &meta->train_batch_size) ||
                zinf_h5_get_num(f, "loss_scale", H5T_NATIVE_DOUBLE, &meta->ls.cur_scale) ||
                zinf_h5_get_num(f, "loss_scale_hysteresis", H5T_NATIVE_INT64, &meta->ls.cur_hysteresis) ||
                zinf_h5_get_num(f, "loss_scale_iter", H5T_NATIVE_INT64, &meta->ls.cur_iter) ||
                zinf_h5_get_num(f, "loss_scale_last_overflow_iter", H5T_NATIVE_INT64, &meta->ls.last_overflow_iter)))
        rc = zinf_errc(ZINF_EINVAL, "%s: the run's scalars (step, optimizer and loss-scale state) are missing", path);
    int64_t maxp;
    int ndset = count_datasets(m, z, &maxp);
    uint64_t *sums = calloc((size_t)ndset, sizeof *sums), *want = calloc((size_t)ndset, sizeof *want);
    float *buf = malloc((size_t)maxp * 3 * 4);
    if (!rc && (!sums || !want || !buf)) rc = zinf_errc(ZINF_ENOMEM, "out of host memory for a checkpoint");
    hid_t dx = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dx, H5FD_MPIO_COLLECTIVE);
    /* The ranks agree before each collective read (a missing or mis-shaped dataset) and after it
     * (a read that failed on one rank alone): no rank waits in a collective call that another has
     * left. An error agreed on is printed once, by the first rank that had it. */
    int di = 0, eio = fault_after(comm->rank, meta->step, true);
    rc = zinf_comm_agree(comm, rc);
    bool agreed = rc != 0;
    for (int u = 0; u < m->nunits && !rc; u++) {
        const zinf_unit *un = &m->units[u];
        int64_t lo, len, wlo, wlen;
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        zinf_zero_ckpt_range(z, u, true, &wlo, &wlen);
        for (int k = 0; k < 3 && !rc; k++) {
            float *bk = buf + (size_t)k * maxp;
            for (int t = 0; t < un->ntensors && !rc; t++, di++) {
                const zinf_tensor_view *tv = &un->t[t];
                int64_t a, b;
                clip_to(tv, lo, len, &a, &b);
                char name[128];
                snprintf(name, sizeof name, "%s/%s", state_group[k], tv->name);
                hid_t d = H5Lexists(f, name, H5P_DEFAULT) > 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
                if (d < 0) rc = zinf_errc(ZINF_EINVAL, "%s: dataset %s is missing", path, name);
                rc = zinf_comm_agree(comm, rc);
                if (rc) {
                    if (d >= 0) H5Dclose(d);
                    agreed = true;
                    break;
                }
                hid_t fs = H5Dget_space(d);
                hsize_t dims[2] = {0, 0};
                int nd = H5Sget_simple_extent_dims(fs, dims, NULL);
                if (nd != (tv->shape[1] ? 2 : 1) || dims[0] != (hsize_t)tv->shape[0] ||
                    (nd == 2 && dims[1] != (hsize_t)tv->shape[1]))
                    rc = zinf_errc(ZINF_EINVAL, "%s: dataset %s has another shape than this model's", path, name);
                hsize_t cnt = (hsize_t)(b - a);
                hid_t ms = H5Screate_simple(1, &cnt, NULL);
                if (b == a) H5Sselect_none(ms);
                if (!rc && select_flat(fs, tv, a - tv->offset, b - tv->offset))
                    rc = zinf_errc(ZINF_EIO, "%s: dataset %s: cannot select this rank's part", path, name);
                rc = zinf_comm_agree(comm, rc);
                if (!rc) {
                    if (H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, dx, bk + (a - lo)) < 0 || di + 1 == eio)
                        rc = zinf_errc(ZINF_EIO, "rank %d: %s: cannot read dataset %s (truncated file?)", comm->rank,
                                       path, name);
                    else if (zinf_h5_get_num(d, "checksum", H5T_NATIVE_UINT64, &want[di]))
                        rc = zinf_errc(ZINF_EINVAL, "%s: dataset %s has no checksum (an incomplete save?)", path, name);
                    rc = zinf_comm_agree(comm, rc);
                }
                agreed = rc != 0;
                /* this rank's share of the checksum: its writer range */
                int64_t wa = wlo > a ? wlo : a, wb = wlo + wlen < b ? wlo + wlen : b;
                if (!rc && wb > wa) sums[di] = zinf_ckpt_checksum(bk + (wa - lo), wa - tv->offset, wb - wa);
                H5Sclose(ms);
                H5Sclose(fs);
                H5Dclose(d);
            }
        }
        for (int k = 0; k < 3 && !rc; k++) rc = zinf_zero_ckpt_set(z, u, (zinf_ckpt_state)k, buf + (size_t)k * maxp);
        if (!agreed) rc = zinf_comm_agree(comm, rc);
        agreed = rc != 0;
    }
    H5Pclose(dx);
    H5Fclose(f);
    if (rc) {
        free(sums);
        free(want);
        free(buf);
        return agreed ? rc : zinf_comm_agree(comm, rc);
    }
    if (!rc && MPI_Allreduce(MPI_IN_PLACE, sums, ndset, MPI_UINT64_T, MPI_SUM, comm->world) != MPI_SUCCESS)
        rc = zinf_errc(ZINF_ECOMM, "checkpoint: the checksums' all-reduce failed");
    di = 0;
    for (int u = 0; u < m->nunits && !rc; u++)
        for (int k = 0; k < 3 && !rc; k++)
            for (int t = 0; t < m->units[u].ntensors && !rc; t++, di++)
                if (sums[di] != want[di])
                    rc = zinf_errc(ZINF_EINVAL, "%s: dataset %s/%s: checksum mismatch (the file is corrupted)", path,
                                   state_group[k], m->units[u].t[t].name);
    free(sums);
    free(want);
    free(buf);
    if (!rc) rc = zinf_zero_ckpt_params_from_master(z);
    return zinf_comm_agree(comm, rc);
}
