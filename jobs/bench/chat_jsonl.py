"""A synthetic chat dataset for the SFT benchmarks (sft_speed.sh, sft_train_speed.sh): N samples
in ms-swift's `messages` layout, one to three turns of English words or Chinese characters, made
with a fixed seed so that every run of a benchmark reads the same bytes.
Usage: python3 chat_jsonl.py OUT.jsonl N [MAX_REPLY_WORDS, default 300]"""
import json
import random
import sys

WORDS = ("the of and to in is was for on that with as by at from model data train loss token batch "
         "memory offload shard rank step gradient optimizer attention layer").split()
HAN = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之"
       "进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各"
       "重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题程展五果料象员位入常文总次品式活设"
       "及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必先回则任取据处队南给色光门即保治北造百规热领七"
       "海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报完类八离华名"
       "确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近千周委素技备半办青省"
       "列习响约支般史感劳便团往历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调"
       "满县局照参红细引听该价严")


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    longest = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    rng = random.Random(7)

    def text(k):
        if rng.random() < 0.3:
            return "".join(rng.choice(HAN) for _ in range(k))
        return " ".join(rng.choice(WORDS) for _ in range(k)).capitalize() + "."

    with open(out, "w") as f:
        for _ in range(n):
            msgs = []
            for _ in range(rng.randint(1, 3)):
                msgs.append({"role": "user", "content": text(rng.randint(5, 60))})
                msgs.append({"role": "assistant", "content": text(rng.randint(10, longest))})
            f.write(json.dumps({"messages": msgs}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
