/* hf: interchange with Hugging Face transformers' GPT-2 (GPT2LMHeadModel). Owns the mapping of
 * zinf's tensors to HF's names and orientation, the config.json zinf writes, the safetensors
 * container (read side; ckpt_tool.c writes it), and `zinf train --init_from DIR`.
 *
 * HF keeps the linear layers as Conv1D, whose weight is (in, out): the transpose of zinf's
 * (out, in). c_attn's output is q | k | v, each n_embd wide with head h at channels h*C/NH.., as
 * zinf's qkv rows, so the qkv weight needs the transpose and nothing else. HF's wte has the real
 * vocabulary's rows; zinf's has padded_vocab rows, the padding zero. The LM head is tied to wte
 * in both and is not stored. */
#ifndef ZINF_HF_H
#define ZINF_HF_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "model.h"
#include "zero.h"

/* zinf's LayerNorm epsilon (kernels.h, layernorm_fwd): HF's layer_norm_epsilon. */
#define ZINF_HF_LN_EPS 1e-5

/* Tensor t of unit u: HF's name ("transformer.h.3.attn.c_attn.weight"), its shape there (rows,
 * cols; cols 0 for a vector) and whether HF stores it transposed. */
void zinf_hf_tensor(const zinf_model *m, int u, int t, char *name, size_t cap, int64_t shape[2], bool *transposed);

/* config.json for the model, as a GPT2Config with zero dropouts; dt names torch_dtype. A string
 * to free(), NULL when out of memory. */
char *zinf_hf_config_text(const zinf_model_cfg *c, zinf_dtype dt);

/* `zinf train --init_from DIR`: the fp32 master weights from DIR/config.json and
 * DIR/model.safetensors (F32, BF16 or F16 tensors; names with or without the "transformer."
 * prefix), each rank setting its own part of each unit; Adam's m and v zero, the padded
 * vocabulary rows zero, then the parameters from the masters. The config's n_layer, n_embd,
 * n_head, n_positions and vocab_size must be the model's. Collective: every rank reads the
 * files; a failure anywhere is agreed on (one message naming the file and the field or tensor). */
int zinf_hf_import(const char *dir, zinf_comm *comm, const zinf_model *m, zinf_zero *z);

#endif
