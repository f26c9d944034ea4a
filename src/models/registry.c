/* The registry: model_type -> family (family.h). The only file that names every family; a new
 * one is a line in `families`. */
#include <string.h>

#include "family.h"

extern const zinf_family zinf_family_gpt2, zinf_family_llama, zinf_family_qwen2, zinf_family_qwen3,
    zinf_family_mistral;

/* the first is the default: a config without model_type, and checkpoints from before it */
static const zinf_family *const families[] = {&zinf_family_gpt2, &zinf_family_llama, &zinf_family_qwen2,
                                              &zinf_family_qwen3, &zinf_family_mistral};
#define NFAM (sizeof families / sizeof families[0])

const zinf_family *zinf_family_find(const char *model_type)
{
    if (!model_type || !model_type[0]) return families[0];
    for (size_t i = 0; i < NFAM; i++)
        if (!strcmp(families[i]->model_type, model_type)) return families[i];
    return NULL;
}

/* a space-separated list of one string field of every family, made once */
static const char *joined(char *buf, size_t cap, const char *(*field)(const zinf_family *))
{
    if (buf[0]) return buf;
    size_t n = 0;
    for (size_t i = 0; i < NFAM; i++) {
        int k = snprintf(buf + n, cap - n, "%s%s", i ? " " : "", field(families[i]));
        n += k > 0 && (size_t)k < cap - n ? (size_t)k : 0;
    }
    return buf;
}

static const char *type_of(const zinf_family *f) { return f->model_type; }
static const char *presets_of(const zinf_family *f) { return f->presets; }

const char *zinf_family_types(void)
{
    static char buf[256];
    return joined(buf, sizeof buf, type_of);
}

const char *zinf_family_presets(void)
{
    static char buf[1024];
    return joined(buf, sizeof buf, presets_of);
}

int zinf_family_preset(zinf_model_cfg *c, const char *name)
{
    for (size_t i = 0; i < NFAM; i++) {
        int rc = families[i]->preset(c, name);
        if (rc) return rc;
    }
    return 0;
}
