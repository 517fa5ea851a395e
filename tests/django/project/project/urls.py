from django.urls import path
from shop import views

urlpatterns = [
    path("orders/", views.place_order),
    path("orders/broken/", views.place_order_then_fail),
    path("results/<str:result_id>/", views.result),
]
