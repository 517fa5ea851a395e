from django.db import transaction
from django.http import JsonResponse

from shop.models import Order
from shop.tasks import confirm_order


def place_order(request):
    with transaction.atomic():
        order = Order.objects.create(item=request.POST["item"], quantity=int(request.POST["quantity"]))
        result = confirm_order.enqueue(order.pk)
    return JsonResponse({"order": order.pk, "result_id": result.id}, status=201)


def place_order_then_fail(request):
    with transaction.atomic():
        order = Order.objects.create(item=request.POST["item"], quantity=int(request.POST["quantity"]))
        confirm_order.enqueue(order.pk)
        raise RuntimeError("payment refused")  # the order and its job are rolled back together


def result(request, result_id):
    found = confirm_order.get_backend().get_result(result_id)
    body = {"status": str(found.status), "errors": [e.exception_class_path for e in found.errors]}
    if found.status == "SUCCESSFUL":
        body["value"] = found.return_value
    return JsonResponse(body)
