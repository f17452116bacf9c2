"""``hopsearch indices attach|detach``: answer over an index the user already has, through a field map
(:mod:`hopsearch.service.attached.fieldmap`), without copying it and without ever writing to it."""

from __future__ import annotations

from typing import Any

import click

from hopsearch.cli.options import with_store
from hopsearch.cli.render import echo_json
from hopsearch.service.access import Identities
from hopsearch.service.attached.fieldmap import PRESETS, Attachment, field_map
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.embedders import make_embedder
from hopsearch.service.embedders.factory import embedder_for_id
from hopsearch.service.errors import ConfigError
from hopsearch.service.store import Store
from hopsearch.service.types import Embedder

#: ``--embedder`` names that build an embedder from the settings rather than from a stored id.
_KINDS = ("minilm", "e5", "openai")


def embedder_named(name: str, settings: Settings) -> Embedder:
    """Return the embedder ``--embedder`` names: ``minilm``, ``e5`` or ``openai`` (the last through the
    ``HOPSEARCH_EMBED_*`` settings), or an embedder id as indices record it (``openai:<model>`` among them)."""
    if name in _KINDS:
        embedder = make_embedder(settings.model_copy(update={"embedder": name}))
        assert embedder is not None
        return embedder
    configured = make_embedder(settings) if settings.embedder != "none" else None
    found = embedder_for_id(name, settings, configured=configured)
    if found is None:
        raise ConfigError(
            f"unknown embedder [{name}]: minilm, e5, openai (HOPSEARCH_EMBED_*), or the id of one of them "
            "(configure HOPSEARCH_EMBEDDER=openai with HOPSEARCH_EMBED_MODEL for another server's model)"
        )
    return found


@click.command("attach")
@click.argument("name")
@click.option("--layout", type=click.Choice(sorted(PRESETS)), help="A known layout's fields (checked all the same).")
@click.option("--title-field", help="The field shown as a hit's title (searched too).")
@click.option("--text-field", help="The field of the text: searched, shown and given to the model.")
@click.option("--also-field", "also", multiple=True, help="Another text field BM25 searches (repeat).")
@click.option("--vector-field", help="A dense_vector field (needs --embedder).")
@click.option("--embedder", help="The model of the vectors: minilm, e5, openai or an embedder id.")
@click.option("--acl-field", help="A keyword field naming who may read each document.")
@click.option(
    "--identities",
    type=click.Choice(["hopsearch", "elastic-connector"]),
    help="How the ACL values name principals (default: elastic-connector for _allow_access_control).",
)
@click.option(
    "--acl-default",
    type=click.Choice(["private", "public"]),
    default="private",
    show_default=True,
    help="How documents without ACL values read (an index without an ACL field is private: admins only).",
)
@click.option("--lang-field", help="A keyword field with each document's language.")
@click.option("--lang", type=click.Choice(["en", "ja"]), help="The language of every document (no field).")
@click.option("--url-field", help="The field of each document's URL.")
@click.option("--id-field", help="A keyword field with the source system's document id (filters on doc_id).")
@click.option("--json", "as_json", is_flag=True, help="Print the attachment as JSON.")
def attach(name: str, **given: Any) -> None:
    """Answer over NAME (an index or alias hopsearch did not make) through a field map: every field is
    checked against its mapping, and vectors against a sample re-embedded. NAME is never written to."""
    settings = load_settings()
    if given["lang_field"] and given["lang"]:
        raise click.UsageError("--lang-field or --lang, not both")
    try:
        fields = field_map(
            given["layout"],
            title=given["title_field"],
            text=given["text_field"],
            also=given["also"],
            vector=given["vector_field"],
            acl=given["acl_field"],
            lang=given["lang_field"],
            url=given["url_field"],
            id=given["id_field"],
        )
        embedder = embedder_named(given["embedder"], settings) if given["embedder"] else None
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    identities: Identities = given["identities"] or (
        "elastic-connector" if fields.acl == "_allow_access_control" else "hopsearch"
    )
    wanted = Attachment(
        name,
        fields,
        lang=given["lang"],
        identities=identities,
        acl_default=given["acl_default"],
        layout=given["layout"],
    )

    async def work(store: Store) -> Attachment:
        return await store.attach(wanted, embedder)

    done = with_store(settings, work)
    if given["as_json"]:
        echo_json(done.to_doc())
        return
    mapped = ", ".join(f"{role}={value}" for role, value in done.fields.to_dict().items() if value)
    click.echo(f"attached [{done.index}]: {mapped}")
    if done.embedder:
        checks = done.checks
        click.echo(
            f"  vectors: {done.embedder} ({done.dims}-d, {done.vector_mode}); {checks.get('sample')} documents "
            f"re-embedded as {checks.get('embedded_as')}: mean cosine {checks.get('cosine')}"
        )
    readers = f"{done.fields.acl} ({done.identities} identities)" if done.fields.acl else "none: admins only"
    click.echo(f"  readers: {readers}; documents without: {done.acl_default}")
    known = done.title_key
    if known is not None and known.key is not None:
        folded = ", lowercased" if known.key.fold == "lowercase" else ""
        click.echo(f"  hops: names looked up in [{known.key.field}]{folded}")
    elif known is not None:
        click.echo(f"  hops: none ({known.why}): hops 1 searches one hop and says so")


@click.command("detach")
@click.argument("name")
def detach(name: str) -> None:
    """Forget NAME's field map (the index itself is left exactly as it is)."""
    settings = load_settings()
    if not with_store(settings, lambda store: store.delete_attachment(name)):
        raise click.ClickException(f"[{name}] is not attached")
    click.echo(f"detached [{name}]")
