# shellcheck shell=sh
# Sourced by the Llama-family benchmarks (llama_speed.sh, llama_offload.sh).
# llama_flops ZINF MODEL LOG T: the model FLOPs per token the figures count, 6 (N - embedding)
# + 12 L NH hs T (embedding = the padded vocabulary x hidden; the attention's scores and sums at
# sequence length T), from `zinf estimate`'s Psi and the shape a zinf run printed in LOG.
llama_flops() {
    _psi=$("$1" estimate --model "$2" | awk '/Psi =/ { for (i = 1; i <= NF; i++) if ($i == "=") { print $(i + 1); exit } }')
    # the query heads: "heads=" after C=, not the kv_heads= later on the line
    _shape=$(sed -n 's/.*zinf: .*(\([0-9.]*\)M parameters, L=\([0-9]*\) C=\([0-9]*\) heads=\([0-9]*\) V=\([0-9]*\).*/\2 \3 \4 \5/p' "$3" | head -1)
    _hd=$(sed -n 's/.* head_dim=\([0-9]*\).*/\1/p' "$3" | head -1)
    # shellcheck disable=SC2086 # four words: L C NH V
    set -- ${_shape:-0 0 0 0} "$4"
    awk -v p="${_psi:-0}" -v l="$1" -v c="$2" -v nh="$3" -v v="$4" -v hd="${_hd:-0}" -v t="$5" 'BEGIN {
        vp = int((v + 127) / 128) * 128; printf "%.6g", 6 * (p - vp * c) + 12 * l * nh * hd * t }'
}
