"""Eq. 1-5 against values worked out by hand for the paper's four GPT-NeoX models (s=2048, V=50304, b=4)."""

from fractions import Fraction

import pytest

from microbench.errors import UsageError
from microbench.workload.messages import Message, merge, wire_bytes
from microbench.workload.model import (
    Model,
    eq2_data_parallel,
    eq3_zero3,
    eq4_pipeline,
    eq5_tensor,
    parameter_count,
    parameter_tensors,
    preset,
)

# Eq. 1 by hand, e.g. 125M: 2*50304*768 = 77,266,944; 2048*768 = 1,572,864;
# 12*(12*768^2 + 8*768) = 12*7,084,032 = 85,008,384; 2*768 = 1,536; sum 163,849,728.
PARAMS = {"19M": 71_459_840, "125M": 163_849_728, "1.3B": 1_418_596_352, "13B": 13_110_159_360}


@pytest.mark.parametrize("name", PARAMS)
def test_eq1_parameters(name):
    assert parameter_count(preset(name)) == PARAMS[name]


@pytest.mark.parametrize("name", PARAMS)
def test_parameter_tensors_sum_to_eq1(name):
    assert sum(t.numel for t in parameter_tensors(preset(name))) == PARAMS[name]


# d = 8: Eq. 2 = 1.75 * params, Eq. 3 = 2.625 * params (e.g. 13B: 13,110,159,360 / 4 * 7 = 22,942,778,880).
EQ2 = {"19M": 125_054_720, "125M": 286_737_024, "1.3B": 2_482_543_616, "13B": 22_942_778_880}
EQ3 = {"19M": 187_582_080, "125M": 430_105_536, "1.3B": 3_723_815_424, "13B": 34_414_168_320}
# b = 4, p = 4: Eq. 4 = 2*4*2048*h*3 = 49,152 h.
EQ4 = {"19M": 25_165_824, "125M": 37_748_736, "1.3B": 100_663_296, "13B": 251_658_240}
# b = 4, t = 8: Eq. 5 = (12L+2) * 8192 h * 7/8, e.g. 1.3B: 290 * 14,680,064 = 4,257,218,560.
EQ5 = {"19M": 271_581_184, "125M": 803_733_504, "1.3B": 4_257_218_560, "13B": 17_689_477_120}


@pytest.mark.parametrize("name", PARAMS)
def test_eq2_to_eq5(name):
    m = preset(name)
    assert eq2_data_parallel(PARAMS[name], 8) == EQ2[name]
    assert eq3_zero3(PARAMS[name], 8) == EQ3[name]
    assert eq4_pipeline(m, 4, 4) == EQ4[name]
    assert eq5_tensor(m, 4, 8) == EQ5[name]


def test_3d_uses_layers_per_stage_and_microbatches():
    # 13B, t=8, p=4: L/p = 10 layers: (12*10 + 2) * 4*2048*5120 * 7/8 = 122 * 36,700,160 = 4,477,419,520 per microbatch
    assert eq5_tensor(preset("13B"), 4, 8, layers=10, microbatches=8) == 8 * 4_477_419_520
    assert eq4_pipeline(preset("13B"), 4, 4, microbatches=8) == 8 * 251_658_240


def test_fractional_volumes_stay_exact():
    assert eq2_data_parallel(10, 3) == Fraction(40, 3)


def test_seq_and_vocab_override():
    m = preset("19M", seq=4096, vocab=1024)
    assert parameter_count(m) == 2 * 1024 * 512 + 4096 * 512 + 6 * (12 * 512 ** 2 + 8 * 512) + 2 * 512


def test_tensor_parallel_shard_splits_matrices_and_vocabulary():
    # tiny model h=64, L=2, V=1024, s=128, t=2, one stage holding everything:
    # 2 * 512*64 + 128*64 + 2*(12*64^2/2 + 8*64) + 2*64 = 65,536 + 8,192 + 50,176 + 128 = 124,032
    m = Model(64, 2, 4, 128, 1024)
    assert sum(t.numel for t in parameter_tensors(m, tp=2)) == 124_032
    # first of two stages: embeddings and one layer, no final norm or output layer
    assert sum(t.numel for t in parameter_tensors(m, tp=2, layers=1, last_stage=False)) == 32_768 + 8_192 + 25_088


def test_bad_model_is_a_usage_error():
    with pytest.raises(UsageError, match="multiple of --heads"):
        Model(100, 2, 3)
    with pytest.raises(UsageError, match="unknown model"):
        preset("7B")


def test_wire_factors():
    assert wire_bytes("allreduce", 800, 8) == 1400
    assert wire_bytes("allgather", 100, 8) == 700          # gathers 800 B, moves 7/8 of it
    assert wire_bytes("reduce_scatter", 800, 8) == 700
    assert wire_bytes("alltoall", 100, 4) == 300
    assert wire_bytes("broadcast", 800, 8) == wire_bytes("reduce", 800, 8) == 700
    assert wire_bytes("send", 64, 2) == 64 and wire_bytes("recv", 64, 2) == 0


def test_merge_sums_counts_of_identical_messages():
    msgs = [Message("allreduce", 8, 1, 2, "gradients"), Message("allreduce", 8, 2, 2, "gradients"),
            Message("broadcast", 8, 1, 2, "setup")]
    assert merge(msgs) == [Message("broadcast", 8, 1, 2, "setup"), Message("allreduce", 8, 3, 2, "gradients")]


def test_full_biases_count_a_real_gpt_layer():
    # a real layer's QKV bias has 3h elements and its MLP-in bias 4h: 13h of vectors, 5h more than Eq. 1
    eq1, full = Model(64, 2, 4, 128, 1024), Model(64, 2, 4, 128, 1024, biases="full")
    assert parameter_count(full) - parameter_count(eq1) == 2 * 5 * 64
    assert sum(t.numel for t in parameter_tensors(full)) == parameter_count(full)
    # under tensor parallelism the column-parallel biases are split t ways, as their weights are
    shapes = {t.name: t.shape for t in parameter_tensors(full, tp=2)}
    assert shapes["layer0.attn.qkv.bias"] == (96,) and shapes["layer0.mlp.in.bias"] == (128,)
    assert shapes["layer0.attn.out.bias"] == (64,)
    with pytest.raises(UsageError, match="bias layout"):
        Model(64, 2, 4, biases="paper")
