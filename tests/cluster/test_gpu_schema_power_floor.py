"""The admin GPU API's schema says the 10 W floor of a GPU's top power limit that
``Gpu.clean`` holds (as the registration schema does since f36594d): it said a minimum of
0, so a client, or schemathesis's schema-valid requests, sent 1-9 W and got a 400."""

from drf_spectacular.generators import SchemaGenerator

from cluster.validators import MIN_TOP_POWER_LIMIT_W


def _schemas() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def test_the_gpu_apis_schema_gives_the_top_power_limits_floor():
    schemas = _schemas()

    for name in ("GpuRequest", "PatchedGpuRequest", "GpuRegistrationRequest"):
        assert schemas[name]["properties"]["max_power_limit_w"]["minimum"] == (
            MIN_TOP_POWER_LIMIT_W
        ), name
