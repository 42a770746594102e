"""Page URLs, included at the site root by config/urls.py. The frontend pages add theirs here."""

urlpatterns: list = []
