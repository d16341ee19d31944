"""Orders remember when their receipt went out: the receipt handler's idempotency mark."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("shop", "0002_order_reference")]

    operations = [
        migrations.AddField(
            model_name="order",
            name="receipt_sent_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
