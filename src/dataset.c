/* dataset: `zinf train --dataset`, the SFT shards of a chat dataset made once and cached; see
 * dataset.h. */
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "file.h"

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static void fnv(unsigned long long *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * FNV_PRIME;
}

/* a string into the key, with its length, so that neighbours cannot run together */
static void fnv_str(unsigned long long *h, const char *s)
{
    uint64_t n = s ? strlen(s) : UINT64_MAX;
    fnv(h, &n, sizeof n);
    if (s) fnv(h, s, strlen(s));
}

/* a file's bytes into the key (a missing file is the absent marker when optional); an error
 * names the option that gave the file (flag) */
static int fnv_file(unsigned long long *h, const char *flag, const char *path, bool optional)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (optional && errno == ENOENT) {
            fnv_str(h, NULL);
            return 0;
        }
        return zinf_errc(-errno, "%s %s: %s", flag, path, strerror(errno));
    }
    static _Thread_local unsigned char buf[1 << 16];
    ssize_t n;
    uint64_t total = 0;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        fnv(h, buf, (size_t)n);
        total += (uint64_t)n;
    }
    int e = errno;
    close(fd);
    if (n < 0) return zinf_errc(-e, "%s %s: %s", flag, path, strerror(e));
    fnv(h, &total, sizeof total);
    return 0;
}

static bool is_dir(const char *p)
{
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}

int zinf_dataset_key(const zinf_chat_data_opts *o, unsigned long long *key)
{
    unsigned long long h = FNV_OFFSET;
    char path[4200];
    fnv_str(&h, "zinf sft shards 1"); /* the shard format and the rules that make them */
    const char *specs[2] = {o->input, o->val_input}, *flags[2] = {zinf_chat_input_flag(o), ZINF_CHAT_VAL_FLAG};
    for (int k = 0; k < 2; k++) {
        fnv_str(&h, specs[k]);
        if (!specs[k]) continue;
        char *file;
        int64_t want;
        ZINF_TRY(zinf_chat_spec(specs[k], &file, &want));
        int rc = fnv_file(&h, flags[k], file, false);
        free(file);
        ZINF_TRY(rc);
    }
    if (is_dir(o->tokenizer)) {
        const char *files[3] = {"tokenizer.json", "tokenizer_config.json", "config.json"};
        for (int k = 0; k < 3; k++) {
            snprintf(path, sizeof path, "%s/%s", o->tokenizer, files[k]);
            ZINF_TRY(fnv_file(&h, "tokenizer", path, k > 0));
        }
    } else {
        ZINF_TRY(fnv_file(&h, "tokenizer", o->tokenizer, false));
    }
    const zinf_template *t = NULL;
    if (o->template_name) {
        if (!(t = zinf_template_find(o->template_name))) return zinf_err_prefix(ZINF_EINVAL, "--template");
    } else {
        if (!is_dir(o->tokenizer))
            return zinf_err("--template NAME is needed when the tokenizer is not a model directory (%s)",
                            zinf_template_names());
        ZINF_TRY(zinf_template_detect(o->tokenizer, &t));
    }
    fnv_str(&h, zinf_template_name(t));
    fnv_str(&h, o->chat.system);
    char date[64];
    zinf_chat_date(&o->chat, date, sizeof date);
    fnv_str(&h, zinf_template_dated(t) ? date : NULL); /* only a template that writes the date */
    int64_t nums[2] = {o->max_length, o->truncation};
    fnv(&h, nums, sizeof nums);
    fnv(&h, &o->split_ratio, sizeof o->split_ratio);
    fnv(&h, &o->seed, sizeof o->seed);
    *key = h;
    return 0;
}

/* remove dir and the files in it (one level: the shards and their counts) */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4400];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}


static bool has_val(const char *dir)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/sft_val_000000.bin", dir);
    return access(p, R_OK) == 0;
}

/* The counts a set was made with, beside its shards (what the start of a run prints: the shards
 * no longer hold the samples --max_length deleted) */
#define COUNTS "sft_counts.json"

static int write_counts(const char *dir, const zinf_chat_counts *c)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/" COUNTS, dir);
    json_t *j = json_pack("{s:I, s:I}", "train_longer", (json_int_t)c->longer[0], "val_longer", (json_int_t)c->longer[1]);
    int rc = j && !json_dump_file(j, p, JSON_COMPACT) ? 0 : zinf_errc(ZINF_EIO, "%s: cannot write the counts", p);
    json_decref(j);
    return rc;
}

/* -1 where the set has no counts (made by a zinf before them) */
static int read_counts(const char *dir, int64_t longer[2])
{
    char p[4400];
    snprintf(p, sizeof p, "%s/" COUNTS, dir);
    longer[0] = longer[1] = -1;
    if (access(p, F_OK) && errno == ENOENT) return 0;
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je), *v[2] = {json_object_get(j, "train_longer"), json_object_get(j, "val_longer")};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++)
        if (!json_is_integer(v[k]) || json_integer_value(v[k]) < 0)
            rc = zinf_err("%s: not the counts of the set (remove %s to make it again)", p, dir);
        else longer[k] = json_integer_value(v[k]);
    json_decref(j);
    return rc;
}

int zinf_dataset_prepare(const zinf_chat_data_opts *o, const char *cache_dir, char *train, char *val, size_t cap,
                         bool *made, int64_t longer[2], FILE *report)
{
    unsigned long long key;
    ZINF_TRY(zinf_dataset_key(o, &key));
    char dir[4200], tmp[4300];
    snprintf(dir, sizeof dir, "%s/%016llx", cache_dir, key);
    *made = false;
    longer[0] = longer[1] = -1;
    if (!is_dir(dir)) {
        size_t mkd; /* the directories made for the cache, taken back when the set is not made */
        ZINF_TRY(zinf_mkdir_p_made(cache_dir, &mkd));
        snprintf(tmp, sizeof tmp, "%s/.%016llx.tmp.%ld", cache_dir, key, (long)getpid());
        remove_dir(tmp);
        int rc = mkdir(tmp, 0755) ? zinf_errc(-errno, "mkdir %s: %s", tmp, strerror(errno)) : 0;
        zinf_chat_data_opts d = *o;
        char prefix[4400];
        snprintf(prefix, sizeof prefix, "%s/sft", tmp);
        d.prefix = prefix;
        zinf_chat_counts counts;
        if (!rc) rc = zinf_chat_make_shards(&d, report, &counts);
        if (!rc) rc = write_counts(tmp, &counts);
        if (!rc && rename(tmp, dir)) {
            /* another run made the same shards meanwhile: theirs are whole, ours go */
            if (errno != EEXIST && errno != ENOTEMPTY) rc = zinf_errc(-errno, "rename %s to %s: %s", tmp, dir, strerror(errno));
        } else if (!rc) {
            *made = true;
            longer[0] = counts.longer[0], longer[1] = counts.longer[1];
        }
        if (!*made) remove_dir(tmp);
        if (rc) zinf_rmdir_made(cache_dir, mkd);
        ZINF_TRY(rc);
    }
    if (!*made) ZINF_TRY(read_counts(dir, longer));
    if ((size_t)snprintf(train, cap, "%s/sft_train_*.bin", dir) >= cap)
        return zinf_err("--dataset_cache %s: the path is too long", cache_dir);
    val[0] = 0;
    if (has_val(dir)) snprintf(val, cap, "%s/sft_val_*.bin", dir);
    return 0;
}
