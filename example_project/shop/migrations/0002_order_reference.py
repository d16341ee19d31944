"""Give orders a unique checkout reference; rows from before it get ``order-<id>``."""

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def fill_references(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    order_model = apps.get_model("shop", "Order")
    for order in order_model.objects.filter(reference__isnull=True):
        order.reference = f"order-{order.pk}"
        order.save(update_fields=["reference"])


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="order",
            name="reference",
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.RunPython(fill_references, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="order",
            name="reference",
            field=models.CharField(max_length=64, unique=True),
        ),
    ]
