"""GPU selection: every form of CUDA_VISIBLE_DEVICES and --gpus, against CUDA's rules."""

import pytest

from dask_metrics.exporter.selection import Candidate, owned, select, select_uuids

GPU0 = Candidate(0, "GPU-aaaaaaaa-0000-0000-0000-000000000000")
GPU1 = Candidate(1, "GPU-bbbbbbbb-0000-0000-0000-000000000001")
GPU2 = Candidate(2, "GPU-bbbbcccc-0000-0000-0000-000000000002")
MIG = Candidate(None, "MIG-dddddddd-0000-0000-0000-000000000003")
ALL = [GPU0, GPU1, GPU2, MIG]


def uuids(spec, candidates=ALL):
    return [c.uuid for c in select(spec, candidates).devices]


def test_none_selects_every_full_gpu_but_no_mig_slice():
    assert uuids(None) == [GPU0.uuid, GPU1.uuid, GPU2.uuid]


@pytest.mark.parametrize("spec", ["", " ", "-1", "NoDevFiles", "none"])
def test_values_that_mean_no_device(spec):
    assert select(spec, ALL).devices == ()


def test_indices_keep_the_given_order_which_is_the_workers_numbering():
    assert uuids("2,0") == [GPU2.uuid, GPU0.uuid]


def test_whitespace_and_duplicates():
    assert uuids(" 1 , 1,0") == [GPU1.uuid, GPU0.uuid]


def test_full_uuids_mig_uuids_and_case():
    assert uuids(f"{MIG.uuid},{GPU1.uuid.upper()}") == [MIG.uuid, GPU1.uuid]


def test_unique_prefix_matches_and_ambiguous_prefix_stops():
    assert uuids("GPU-aaaa") == [GPU0.uuid]
    sel = select("0,GPU-bbbb,1", ALL)
    assert [c.uuid for c in sel.devices] == [GPU0.uuid]
    assert sel.unmatched == "GPU-bbbb"


def test_parsing_stops_at_the_first_invalid_token_like_cuda():
    sel = select("1,7,0", ALL)
    assert [c.uuid for c in sel.devices] == [GPU1.uuid]
    assert sel.unmatched == "7"
    assert select("0,-1,1", ALL).unmatched == "-1"


def test_worker_info_uuids():
    assert [c.uuid for c in select_uuids([GPU2.uuid, GPU0.uuid], ALL).devices] == [
        GPU2.uuid, GPU0.uuid]
    assert select_uuids([], ALL).devices == ()


@pytest.mark.parametrize(("option", "visible", "spec"), [
    (None, "1,2,3,0", "1"),  # dask-cuda's second worker of four: its own device first
    (None, f"{MIG.uuid},{GPU1.uuid}", MIG.uuid),
    (None, f" {GPU2.uuid} ,{GPU0.uuid}", GPU2.uuid),
    (None, "-1", ""),  # no device stays no device
    (None, "", ""),
    (None, None, None),  # not said: the worker-info file, else every GPU
    ("all", "1,2,3,0", "1,2,3,0"),
    (" ALL ", None, None),
    ("2,0", "1,2,3,0", "2,0"),  # a list given is the worker's, whole
    ("", "1,0", ""),
])
def test_a_worker_owns_the_first_visible_device_unless_told(option, visible, spec):
    assert owned(option, visible) == spec
