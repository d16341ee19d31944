"""The effects table and its commit gate (see models.Effect)."""

from django.db import migrations, models

GATE = """
CREATE FUNCTION exact_effects_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(NEW.gate);
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER trg_exact_effects_gate
    AFTER INSERT ON exact_effects DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.gate IS NOT NULL)
    EXECUTE FUNCTION exact_effects_gate();
"""

GATE_REVERSE = """
DROP TRIGGER trg_exact_effects_gate ON exact_effects;
DROP FUNCTION exact_effects_gate();
"""


class Migration(migrations.Migration):
    initial = True

    operations = [  # noqa: RUF012
        migrations.CreateModel(
            name="Effect",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job_id", models.UUIDField(db_index=True)),
                ("run_number", models.IntegerField()),
                ("attempt", models.IntegerField()),
                ("worker_id", models.TextField()),
                ("gate", models.BigIntegerField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={"db_table": "exact_effects"},
        ),
        migrations.RunSQL(GATE, GATE_REVERSE),
    ]
