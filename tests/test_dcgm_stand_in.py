"""The dcgm-exporter stand-in renders what dcgm-exporter 4.0-4.8.2 renders: the lines below
are quoted from its own test fixture and from pages users posted (docs/research/
dcgm-exporter.md, §1.6), byte for byte."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.dcgm_exporter import (
    DEFAULT_COUNTERS,
    SM_ACTIVE,
    DcgmExporter,
    Entity,
    Field,
    render,
)

H100 = "NVIDIA H100 80GB HBM3"
FIELDS = {f.name: f for f in DEFAULT_COUNTERS}


def test_the_exporters_own_fixture() -> None:
    """internal/pkg/server/server_test.go: a field with no help, no label-type field."""
    gpu = Entity(0, "GPU-00000000-0000-0000-0000-000000000000", "", "NVIDIA T400 4GB")
    page = render([(gpu, {"TEST_METRIC": 42})], hostname="testhost",
                  fields=[Field(9999, "TEST_METRIC", "gauge", "")])
    assert page == ('# HELP TEST_METRIC \n# TYPE TEST_METRIC gauge\n'
                    'TEST_METRIC{gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000000",'
                    'pci_bus_id="",device="nvidia0",modelName="NVIDIA T400 4GB",'
                    'Hostname="testhost"} 42\n')


def test_a_pods_gpu_and_a_free_one_as_posted() -> None:
    """Issue #490 (4.x on Kubernetes): only the GPU a pod holds has the pod's labels."""
    held = Entity(0, "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b", "00000000:8D:00.0", H100,
                  pod={"pod": "dcgmproftester2", "namespace": "default",
                       "container": "dcgmproftester2"})
    free = Entity(1, "GPU-15338f3e-5fd9-962d-921a-979b820520f0", "00000000:91:00.0", H100)
    page = render([(held, {"DCGM_FI_DEV_GPU_UTIL": 0}), (free, {"DCGM_FI_DEV_GPU_UTIL": 0})],
                  hostname="computeinstance-e00c1p6dpy98xytphp", driver="550.144.03")
    assert page.splitlines() == [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b",'
        'pci_bus_id="00000000:8D:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="computeinstance-e00c1p6dpy98xytphp",DCGM_FI_DRIVER_VERSION="550.144.03",'
        'container="dcgmproftester2",namespace="default",pod="dcgmproftester2"} 0',
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-15338f3e-5fd9-962d-921a-979b820520f0",'
        'pci_bus_id="00000000:91:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="computeinstance-e00c1p6dpy98xytphp",DCGM_FI_DRIVER_VERSION="550.144.03"} 0']


def test_two_mig_instances_of_one_gpu_as_posted() -> None:
    """Issue #512: MIG instances carry the parent's gpu, UUID and device, told apart by
    GPU_I_ID; a double has six decimals."""
    uuid = "GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77"
    a = Entity(0, uuid, "00000000:1A:00.0", H100, "1g.10gb", 7,
               {"pod": "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl",
                "namespace": "model-playground-stg", "container": "kserve-container"})
    b = Entity(0, uuid, "00000000:1A:00.0", H100, "1g.10gb", 8)
    name = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    lines = render([(a, {name: 0.0}), (b, {name: 0})], hostname="gsrh100-074",
                   driver="535.129.03").splitlines()
    assert lines[2:] == [
        f'{name}{{gpu="0",UUID="{uuid}",pci_bus_id="00000000:1A:00.0",device="nvidia0",'
        'modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",'
        'Hostname="gsrh100-074",DCGM_FI_DRIVER_VERSION="535.129.03",'
        'container="kserve-container",namespace="model-playground-stg",'
        'pod="text-embedding-predictor-00008-deployment-57946f6c67-vdtjl"} 0.000000',
        f'{name}{{gpu="0",UUID="{uuid}",pci_bus_id="00000000:1A:00.0",device="nvidia0",'
        'modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="8",'
        'Hostname="gsrh100-074",DCGM_FI_DRIVER_VERSION="535.129.03"} 0.000000']


def test_families_by_field_id_blanks_left_out_and_a_valid_page() -> None:
    """Families in ascending DCGM field id whatever the file's order; a blank reading is no
    line, a field blank on every GPU no family; the old namespace and 4.8.3's hostname
    rename labels only; Prometheus' parser reads every sample."""
    gpus = [Entity(i, f"GPU-{i}", f"00000000:0{i}:00.0", pod={"pod": "p", "namespace": "n",
                                                               "container": "c"})
            for i in range(2)]
    values = [{"DCGM_FI_DEV_FB_USED": 1024, "DCGM_FI_PROF_DRAM_ACTIVE": 0.25,
               "DCGM_FI_DEV_POWER_USAGE": 412.345, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
               987654321, "DCGM_FI_DEV_XID_ERRORS": 0, "DCGM_FI_PROF_SM_ACTIVE": 0.5},
              {"DCGM_FI_DEV_FB_USED": None, "DCGM_FI_PROF_DRAM_ACTIVE": 0.75}]
    page = render(list(zip(gpus, values, strict=True)))
    names = [line.split()[2] for line in page.splitlines() if line.startswith("# TYPE")]
    assert names == ["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                     "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_USED",
                     "DCGM_FI_PROF_DRAM_ACTIVE"]  # SM_ACTIVE: commented out by default
    assert page.endswith("} 0.750000\n") and " 412.345000\n" in page and " 987654321\n" in page
    assert page.count("DCGM_FI_DEV_FB_USED{") == 1
    assert ',err_code="0",err_msg="No Error",namespace="n",pod="p"} 0\n' in page
    families = {f.name: f for f in text_string_to_metric_families(page)}
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    assert [s.value for s in families["DCGM_FI_PROF_DRAM_ACTIVE"].samples] == [0.25, 0.75]
    enabled = render(list(zip(gpus, values, strict=True)), fields=[*DEFAULT_COUNTERS, SM_ACTIVE])
    assert "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n" in enabled
    old = render([(gpus[0], values[0])], fields=[FIELDS["DCGM_FI_DEV_FB_USED"]],
                 old_namespace=True, hostname_label="hostname")
    assert old.splitlines()[2] == (
        'DCGM_FI_DEV_FB_USED{gpu="0",uuid="GPU-0",pci_bus_id="00000000:00:00.0",'
        'device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",hostname="gpu-node-1",'
        'container_name="c",pod_name="p",pod_namespace="n"} 1024')


def test_it_serves_the_page_as_go_would() -> None:
    readings = [(Entity(0, "GPU-0"), {"DCGM_FI_DEV_GPU_UTIL": 37})]
    with DcgmExporter(lambda: render(readings)) as exporter:
        with urllib.request.urlopen(f"http://{exporter.target}/metrics", timeout=5) as r:
            assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
            assert r.read().decode() == render(readings)
        with urllib.request.urlopen(f"http://{exporter.target}/health", timeout=5) as r:
            assert r.read() == b"OK"
        assert exporter.scrapes == 1
