"""What makes kept answers stale clears the response cache (chat.generation.response_cache): a change to
a model's routes (a new version, or a rollout's weights) or to the moderation policy (an answer it
allowed might now be blocked). Changing the product's system prompt needs nothing here: it is part of
every prompt, so of every key."""

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from chat.generation import auto_route, response_cache, semantic_cache
from chat.models import AutoModelPolicy, SemanticCachePolicy
from inference.models import ModelRoute
from moderation.models import Category


@receiver([post_save, post_delete], sender=ModelRoute, dispatch_uid="response-cache-routes")
def routes_changed(sender, instance: ModelRoute, **kwargs) -> None:
    response_cache.clear_after_commit(f"the routes of {instance.model} changed")


@receiver([post_save, post_delete], sender=Category, dispatch_uid="response-cache-moderation")
def moderation_changed(sender, instance: Category, **kwargs) -> None:
    response_cache.clear_after_commit(f"the moderation category {instance.name} changed")


@receiver(post_save, sender=SemanticCachePolicy, dispatch_uid="semantic-cache-policy")
def semantic_policy_changed(sender, instance: SemanticCachePolicy, **kwargs) -> None:
    """Every process reads the new policy once it is committed."""
    transaction.on_commit(semantic_cache.forget_policy, robust=True)


@receiver(post_save, sender=AutoModelPolicy, dispatch_uid="auto-model-policy")
def auto_policy_changed(sender, instance: AutoModelPolicy, **kwargs) -> None:
    """Every process reads the new target share (and works its threshold out again) once committed."""
    transaction.on_commit(auto_route.forget_policy, robust=True)
