"""Django's admin app with Wattflow's site (``config.admin_site``) as its default site, so
every ModelAdmin registered on ``admin.site``, Django's own (users, groups) included, gets its
lists' lookups bounded. Kept apart from the site: this module is imported while the apps
load, before any model may be."""

from django.contrib.admin.apps import AdminConfig


class WattflowAdminConfig(AdminConfig):
    default_site = "config.admin_site.WattflowAdminSite"
