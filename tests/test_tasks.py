"""Tokenizer round trips and verifiers on right, wrong and malformed completions."""
import random

import pytest

import toy_tasks


def test_tokenizer_round_trip_and_specials():
    text = "47*85=47*5=235,47*80=3760;3995"
    ids = toy_tasks.encode(text)
    assert len(ids) == len(text)  # character level: no merges
    assert toy_tasks.decode(ids) == text
    assert toy_tasks.decode(ids + [toy_tasks.EOS] + toy_tasks.encode("99")) == text  # cut at EOS
    assert toy_tasks.decode([toy_tasks.PAD] + ids) == text
    assert toy_tasks.ENC.n_vocab == toy_tasks.VOCAB_SIZE == len(toy_tasks.ALPHABET) + 2
    assert toy_tasks.N_OUT == toy_tasks.PAD  # PAD is the last id and never an output


@pytest.mark.parametrize("bad", ["12a", "1 2", "é", "<|eos|>"])
def test_tokenizer_rejects_foreign_characters(bad):
    with pytest.raises(ValueError) as e:
        toy_tasks.encode(bad)
    assert "outside the alphabet" in str(e.value) and "\n" not in str(e.value)


def test_add_verifier():
    t = toy_tasks.make_task("add", 2)
    p = (47, 85)
    assert t.prompt(p) == "47+85="
    assert t.solution(p) == "132"
    assert t.reward(p, "132") == 1.0
    for wrong in ["131", "0132", "132,", "", "+", "13 2", "1;32"]:
        assert t.reward(p, wrong) == 0.0, wrong
    assert t.flawed(p) == "122" and t.reward(p, t.flawed(p)) == 0.0  # the carry forgotten
    assert t.flawed((41, 35)) == "76"  # nothing to carry: the flawed teacher is right


def test_add_scratchpad_and_categories():
    t = toy_tasks.make_task("add", 2, scratchpad=True)
    p = (47, 85)
    s = t.solution(p)
    assert s == "7+5=12,4+8+1=13;132"
    assert t.reward(p, s) == 1.0
    assert t.reward(p, "7+5=12,4+8+1=13;131") == 0.0
    assert t.reward(p, "7+5=12,4+8+1=13132") == 0.0  # no separator: malformed
    assert t.reward(p, "1;2;132") == 0.0
    cats = t.categories(p, s)
    assert len(cats) == len(s) + 1 and cats[-1] == "template"  # EOS
    by_char = dict(zip(range(len(s)), cats))
    assert by_char[0] == "copy" and by_char[2] == "copy"          # 7, 5 restated
    assert by_char[1] == "template" and by_char[3] == "template"  # + =
    assert by_char[4] == "compute" and by_char[5] == "compute"    # 12
    assert [cats[i] for i in range(len(s) - 3, len(s))] == ["compute"] * 3  # 132


def test_mul_verifier_and_scratchpad():
    t = toy_tasks.make_task("mul", 2, scratchpad=True)
    p = (47, 85)
    assert t.solution(p) == "47*5=235,47*80=3760;3995"
    assert t.reward(p, "47*5=235,47*80=3760;3995") == 1.0
    assert t.reward(p, "anything;3996") == 0.0
    t2 = toy_tasks.make_task("mul", 2)
    assert t2.reward(p, "3995") == 1.0 and t2.reward(p, "399") == 0.0
    assert t2.flawed((93, 58)) == "4394"  # 744 + 4650 with the carries forgotten (5394)
    assert t2.flawed(p) == "3995"  # 235 + 3760 needs no carry


def test_primes_has_several_correct_answers():
    t = toy_tasks.make_task("primes")
    p = (58,)
    answers = set(t.answers(p))
    assert {"5+53", "11+47", "17+41", "29+29", "53+5"} <= answers
    for a in answers:
        assert t.reward(p, a) == 1.0
    for wrong in ["1+57", "9+49", "29+30", "058", "+58", "5+053", "29++29", ""]:
        assert t.reward(p, wrong) == 0.0, wrong
    rng = random.Random(0)
    assert len({t.solution(p, rng) for _ in range(50)}) > 1  # SFT sees several answers


def test_held_out_set_is_fixed_and_disjoint():
    t = toy_tasks.make_task("add", 2)
    a, b = toy_tasks.eval_problems(t, 100, 3), toy_tasks.eval_problems(t, 100, 3)
    assert a == b and len(set(a)) == 100
    assert toy_tasks.eval_problems(t, 100, 4) != a
    draw = toy_tasks.train_sampler(t, a, 3)
    held = set(a)
    assert not any(draw() in held for _ in range(5000))


def test_unknown_task():
    with pytest.raises(ValueError, match="unknown task"):
        toy_tasks.make_task("div")
