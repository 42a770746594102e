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


def test_the_registration_schema_gives_each_limits_bounds_as_stored():
    # Each of the three limits is judged in whole watts (Python's round, half to even): the
    # schema's bounds are the floats stored at the floor and at the ceiling, 2000.5 W
    # (stored as 2000 W) included and 0.5 W (stored as 0 W) not.
    props = _schemas()["GpuRegistrationRequest"]["properties"]
    for name in ("min_power_limit_w", "default_power_limit_w"):
        assert props[name]["minimum"] == 0.5, name
        assert props[name]["exclusiveMinimum"] is True, name
        assert whole_watts(0.5) == 0 and whole_watts(0.51) == 1
    assert "exclusiveMinimum" not in props["max_power_limit_w"]
    for name in ("min_power_limit_w", "default_power_limit_w", "max_power_limit_w"):
        assert props[name]["maximum"] == 2000.5, name
        assert "exclusiveMaximum" not in props[name], name
    assert whole_watts(2000.5) == 2000
