# Rows stored while NaN and Infinity were accepted are repaired, not dropped, before 0005
# adds the CHECKs that refuse them (a migration of its own: PostgreSQL will not ALTER a table
# in the transaction that updated it while deferred foreign-key checks are pending).
from django.db import migrations

# A learning rate becomes unset (as if never given), a tolerance its default, progress 0
# iterations done, and a budget limit the largest allowed (cluster.validators), so that an
# "unlimited" limit stays as near unlimited as may be stored.
NON_FINITE = "IN ('NaN'::float8, 'Infinity'::float8, '-Infinity'::float8)"
REPAIR = [
    f"UPDATE cluster_job SET base_lr = NULL WHERE base_lr {NON_FINITE}",
    f"UPDATE cluster_job SET max_lr = NULL WHERE max_lr {NON_FINITE}",
    f"UPDATE cluster_job SET slowdown_tolerance = 0.1 WHERE slowdown_tolerance {NON_FINITE}",
    f"UPDATE cluster_job SET completed_iterations = 0 WHERE completed_iterations {NON_FINITE}",
    f"UPDATE cluster_budget SET energy_limit_kwh = 1e9 WHERE energy_limit_kwh {NON_FINITE}",
    f"UPDATE cluster_budget SET carbon_limit_kg = 1e9 WHERE carbon_limit_kg {NON_FINITE}",
    f"UPDATE cluster_budget SET warn_fraction = 0.8 WHERE warn_fraction {NON_FINITE}",
]


class Migration(migrations.Migration):
    dependencies = [("cluster", "0003_agent_node_spool_health")]

    operations = [migrations.RunSQL(REPAIR, reverse_sql=migrations.RunSQL.noop)]
