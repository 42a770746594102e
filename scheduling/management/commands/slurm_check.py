"""``manage.py slurm_check``: which Slurm the Slurm executor would talk to, what it offers and
what it lacks, and whether Wattflow's partition and nodes are there. Exits non-zero with one
line when Slurm cannot be reached."""

from django.core.management.base import CommandError

from cluster.models import Node
from config.commands import OneLineCommand
from scheduling.executors.slurm import SlurmExecutor
from scheduling.executors.slurm_cli import SlurmError


class Command(OneLineCommand):
    help = "Check the Slurm the Slurm executor is configured for (WATTFLOW_SLURM_*)."

    def handle(self, *args, **options):
        executor = SlurmExecutor.from_settings()
        try:
            for line in executor.capabilities():
                self.stdout.write(line)
            slurm_nodes = {n.name: n for n in executor.cli.nodes()}
        except SlurmError as exc:
            raise CommandError(f"Slurm is not reachable: {exc}") from None
        ours = list(Node.objects.order_by("name").values_list("name", flat=True))
        missing = [name for name in ours if name not in slurm_nodes]
        for name in ours:
            if name in slurm_nodes:
                info = slurm_nodes[name]
                flags = "+".join(info.flags)
                state = f"{info.state}{'+' + flags if flags else ''}"
                self.stdout.write(f"node {name}: in Slurm, {state}")
        if missing:
            self.stdout.write(
                f"MISSING in Slurm: {len(missing)} Wattflow node(s) ({', '.join(missing)}): "
                "the executor cannot place jobs there"
            )
