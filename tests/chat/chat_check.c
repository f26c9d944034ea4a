/* chat_check: without arguments, unit checks of chat.c against expectations written here (ms-swift's
 * Qwen2.5 rendering of a two-round conversation, the #N and split counts); with arguments, zinf's
 * chat reading, sampling and rendering printed for test_chat.sh to compare with its Python
 * reference (chat_ref.py).
 *   chat_check perm LEN SEED            numpy.random.RandomState(SEED).permutation(LEN)
 *   chat_check gperm LEN SEED           numpy.random.default_rng(SEED).permutation(LEN)
 *   chat_check select LEN N RATIO SEED  "train ..." and "val ..." rows of FILE#N (N 0: no #N)
 *                                       with --split_dataset_ratio RATIO and --data_seed SEED
 *   chat_check render SPEC TEMPLATE     one JSON line per sample: [[text, loss], ...]
 *   chat_check encode SPEC TEMPLATE TOKENIZER   one JSON line per sample: {"ids": [...], "loss": [...]}
 * SPEC is FILE or FILE#N (sampled with seed 42). Errors: zinf's message on stderr, exit 1. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "err.h"
#include "../unit/check.h"

static int fail(void)
{
    fprintf(stderr, "zinf: error: %s\n", zinf_errmsg());
    return 1;
}

static void print_idx(const char *tag, const int64_t *v, int64_t n)
{
    if (tag) printf("%s", tag);
    for (int64_t i = 0; i < n; i++) printf("%s%lld", i || tag ? " " : "", (long long)v[i]);
    printf("\n");
}

static int unit(void)
{
    /* ms-swift's qwen2_5 on [user 1+1?, assistant 2, user And +1?, assistant 3]: its default system,
     * every reply and its <|im_end|>\n trained (the history turn's through the dynamic EOS, which
     * zinf_chat_encode applies on ids), the rest not */
    zinf_chat_msg m[] = {{ZINF_ROLE_USER, "1+1?", 1}, {ZINF_ROLE_ASSISTANT, "2", 2},
                         {ZINF_ROLE_USER, "And +1?", 3}, {ZINF_ROLE_ASSISTANT, "3", 4}};
    zinf_chat c = {m, 4, 4, 1};
    const char *want[] = {"<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                          "assistant.<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n",
                          "2", "<|im_end|>\n<|im_start|>user\nAnd +1?<|im_end|>\n<|im_start|>assistant\n",
                          "3<|im_end|>\n"};
    zinf_segs sg;
    CHECK(zinf_chat_render(zinf_template_find("qwen2_5"), &c, NULL, &sg) == 0, "%s", zinf_errmsg());
    CHECK(sg.n == 4, "qwen2_5: %d segments, want 4", sg.n);
    for (int i = 0; i < sg.n && i < 4; i++) {
        CHECK(!strcmp(sg.text[i], want[i]), "segment %d: '%s'", i, sg.text[i]);
        CHECK(sg.loss[i] == (i % 2), "segment %d: loss %d", i, sg.loss[i]);
    }
    zinf_segs_free(&sg);
    /* llama3_2 with the date given; --system fills the empty system slot */
    zinf_chat_opts o = {.system = "S", .date = "01 Feb 2025"};
    zinf_chat c1 = {m, 2, 2, 1};
    CHECK(zinf_chat_render(zinf_template_find("llama3_2"), &c1, &o, &sg) == 0, "%s", zinf_errmsg());
    CHECK(sg.n == 2 && !strcmp(sg.text[0], "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                                              "Cutting Knowledge Date: December 2023\nToday Date: 01 Feb 2025\n\nS"
                                              "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n1+1?<|eot_id|>"
                                              "<|start_header_id|>assistant<|end_header_id|>\n\n") &&
              !strcmp(sg.text[1], "2<|eot_id|>"), "llama3_2: %s", sg.n ? sg.text[0] : "");
    zinf_segs_free(&sg);
    /* names: ms-swift's, and an unknown one refused by name */
    CHECK(zinf_template_find("mistral") == NULL && strstr(zinf_errmsg(), "unknown template 'mistral'"), "%s",
          zinf_errmsg());
    CHECK(zinf_template_find("llama3_1") == zinf_template_find("llama3_2"), "llama3_1 is llama3_2");
    /* FILE#N with N > len: every row N/len times, then N%len rows of the permutation */
    int64_t *t, *v, nt, nv, p[10];
    CHECK(zinf_chat_select(10, 25, 0, 42, &t, &nt, &v, &nv) == 0 && nt == 25 && nv == 0, "select 10 25");
    zinf_chat_permutation(10, 42, p);
    for (int i = 0; i < 20; i++) CHECK(t[i] == i % 10, "sample[%d] = %lld", i, (long long)t[i]);
    for (int i = 0; i < 5; i++) CHECK(t[20 + i] == p[i], "sample[%d]", 20 + i);
    free(t), free(v);
    int seen[10] = {0};
    for (int i = 0; i < 10; i++) seen[p[i]]++;
    for (int i = 0; i < 10; i++) CHECK(seen[i] == 1, "permutation holds %d %d times", i, seen[i]);
    /* the split: max(int(min(len, N) * ratio), 1) validation rows, N minus those for training */
    CHECK(zinf_chat_select(100, 0, 0.1, 42, &t, &nt, &v, &nv) == 0 && nv == 10 && nt == 90, "split 100 0.1");
    free(t), free(v);
    CHECK(zinf_chat_select(7, 0, 0.01, 42, &t, &nt, &v, &nv) == 0 && nv == 1 && nt == 6, "split 7 0.01");
    free(t), free(v);
    CHECK(zinf_chat_select(10, 30, 0.25, 42, &t, &nt, &v, &nv) == 0 && nv == 2 && nt == 28, "split 10#30 0.25");
    free(t), free(v);
    CHECK(zinf_chat_select(1, 0, 0.5, 42, &t, &nt, &v, &nv) != 0 && strstr(zinf_errmsg(), "leaves no training"),
          "%s", zinf_errmsg());
    return check_done("chat_check");
}

int main(int argc, char **argv)
{
    if (argc < 2) return unit();
    const char *mode = argv[1];
    if (!strcmp(mode, "perm") && argc == 4) {
        int64_t n = atoll(argv[2]), *p = malloc((size_t)(n + 1) * sizeof *p);
        zinf_chat_permutation(n, (uint32_t)strtoul(argv[3], NULL, 10), p);
        print_idx(NULL, p, n);
        free(p);
        return 0;
    }
    if (!strcmp(mode, "gperm") && argc == 4) {
        int64_t n = atoll(argv[2]), *p = malloc((size_t)(n + 1) * sizeof *p);
        zinf_chat_rng_permutation(n, strtoull(argv[3], NULL, 10), p);
        print_idx(NULL, p, n);
        free(p);
        return 0;
    }
    if (!strcmp(mode, "select") && argc == 6) {
        int64_t *t, *v, nt, nv;
        if (zinf_chat_select(atoll(argv[2]), atoll(argv[3]), atof(argv[4]), (uint32_t)strtoul(argv[5], NULL, 10), &t,
                             &nt, &v, &nv))
            return fail();
        print_idx("train", t, nt);
        print_idx("val", v, nv);
        free(t);
        free(v);
        return 0;
    }
    if ((!strcmp(mode, "render") && argc == 4) || (!strcmp(mode, "encode") && argc == 5)) {
        const zinf_template *t = zinf_template_find(argv[3]);
        if (!t) return fail();
        zinf_chat_set cs;
        int64_t *pick, npick, *none, nn;
        if (zinf_chat_read("--input", argv[2], &cs) || zinf_chat_select(cs.n, cs.want, 0, 42, &pick, &npick, &none, &nn))
            return fail();
        free(none);
        zinf_tok *tok = NULL;
        if (argc == 5 && zinf_tok_load(argv[4], &tok)) return fail();
        zinf_chat_opts o = {0};
        int rc = 0;
        for (int64_t i = 0; i < npick && !rc; i++) {
            const zinf_chat *c = &cs.row[pick[i]];
            json_t *j;
            if (!tok) {
                zinf_segs sg;
                if ((rc = zinf_chat_render(t, c, &o, &sg))) break;
                j = json_array();
                for (int k = 0; k < sg.n; k++)
                    json_array_append_new(j, json_pack("[s,i]", sg.text[k], sg.loss[k]));
                zinf_segs_free(&sg);
            } else {
                zinf_ids ids = {0};
                uint8_t *loss = NULL;
                size_t cap = 0;
                if ((rc = zinf_chat_encode(t, tok, c, &o, &ids, &loss, &cap))) break;
                json_t *a = json_array(), *b = json_array();
                for (size_t k = 0; k < ids.n; k++) {
                    json_array_append_new(a, json_integer(ids.id[k]));
                    json_array_append_new(b, json_integer(loss[k]));
                }
                j = json_pack("{s:o,s:o}", "ids", a, "loss", b);
                zinf_ids_free(&ids);
                free(loss);
            }
            char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
            printf("%s\n", s);
            free(s);
            json_decref(j);
        }
        printf("skipped %lld\n", (long long)cs.no_assistant);
        free(pick);
        if (tok) zinf_tok_free(tok);
        zinf_chat_set_free(&cs);
        return rc ? fail() : 0;
    }
    fprintf(stderr, "chat_dump: bad arguments\n");
    return 2;
}
