"""tiny.py: a causal LM and a tokenizer built on the spot, for the tests and a first run.

A two-layer Qwen2 of about 30k parameters over this project's character alphabet
(toy_tasks.ALPHABET), and a character-level fast tokenizer: nothing is downloaded, so the
extra's tests run on a CPU in seconds. A real model replaces both (train_lm.py --model).
"""
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from trl_bridge.lesson import load

(toy_tasks,) = load("toy_tasks")

EOS, PAD = "<eos>", "<pad>"


def tokenizer():
    """One token per character of the project's alphabet, plus EOS and PAD."""
    vocab = {ch: i for i, ch in enumerate(toy_tasks.ALPHABET)}
    vocab.update({EOS: len(vocab), PAD: len(vocab) + 1})
    tok = Tokenizer(models.WordLevel(vocab, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")  # every character
    tok.decoder = decoders.Fuse()  # decoded text without spaces between the characters
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                   padding_side="left")


def model(tok, seed=0, width=32, layers=2):
    """A small Qwen2 whose vocabulary is the tokenizer's, initialised from ``seed``."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=width, intermediate_size=2 * width,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=128, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg)
