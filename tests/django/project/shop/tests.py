"""The project's own tests, run by `manage.py test shop` (tests/django/test_django.py): a project
testing with the backend, whose test database Django's test runner must be able to drop."""

import threading

from django.test import TransactionTestCase

from shop.tasks import divide


class EnqueueTests(TransactionTestCase):
    def test_enqueue_then_read_the_result_here_and_in_another_thread(self):
        result = divide.enqueue(6, 3)
        # read back on the backend's own connection: the same TaskResult, field for field
        self.assertEqual(divide.get_result(result.id), result)
        self.assertIsNotNone(result.enqueued_at)
        seen = []
        reader = threading.Thread(target=lambda: seen.append(str(divide.get_result(result.id).status)))
        reader.start()
        reader.join()
        self.assertEqual(seen, ["READY"])
