# When an operator last lifted each address's suppression, so that a provider's replay of an
# older tracking event does not suppress it again (notifications.services.suppression).

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0013_mysql_queue'),
    ]

    operations = [
        migrations.CreateModel(
            name='SuppressionLift',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('address', models.EmailField(max_length=254, unique=True)),
                ('lifted_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
    ]
