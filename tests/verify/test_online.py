"""Online softmax: the tile merge with rescaling keeps its loop invariant; without rescaling it does not."""

from axon.verify import Counterexample, prove_online_softmax


def test_online_softmax_step_and_exit_are_proved_and_the_unrescaled_merge_refuted():
    result = prove_online_softmax()
    assert result.proved
    assert isinstance(result.without_rescale, Counterexample) and result.without_rescale.confirmed
