"""The admin GPU API's schema says the 10 W floor of a GPU's top power limit that
``Gpu.clean`` holds (as the registration schema does since f36594d): it said a minimum of
0, so a client, or schemathesis's schema-valid requests, sent 1-9 W and got a 400."""

from drf_spectacular.generators import SchemaGenerator

from cluster.validators import MIN_TOP_POWER_LIMIT_W, whole_watts


def _schemas() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def test_the_gpu_apis_schema_gives_the_top_power_limits_floor():
    schemas = _schemas()

    for name in ("GpuRequest", "PatchedGpuRequest"):
        assert schemas[name]["properties"]["max_power_limit_w"]["minimum"] == (
            MIN_TOP_POWER_LIMIT_W
        ), name
    # Registration takes NVML's float and stores it in whole watts: its minimum is the
    # least float stored at the floor (9.5 W, stored as 10 W).
    minimum = schemas["GpuRegistrationRequest"]["properties"]["max_power_limit_w"]["minimum"]
    assert minimum == MIN_TOP_POWER_LIMIT_W - 0.5
    assert whole_watts(minimum) == MIN_TOP_POWER_LIMIT_W
