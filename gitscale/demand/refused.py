"""A source's credential that its API refused, said the way gitscale.yaml declares it.

An on-call engineer paged for ``answered 401`` must not have to map a URL back to a
credential: the message names it as the config does (``{file: /var/run/secrets/gh/token}``,
``{env: GITHUB_TOKEN}``, with ``NAME_FILE``'s path when that is where it was read), says whether
gitscale read it again after the refusal (a file is: ``config/rotating.py``; a variable is fixed
for the process), and what to check — the permissions of the README's credentials table.
``resolve.secret_error`` puts it at the line of gitscale.yaml that declares it. Never a value:
the API's words are the client's error, already masked (``clients/http.py``).
"""
from __future__ import annotations

from gitscale.clients.errors import ApiError, RateLimited, Unsendable
from gitscale.config.secrets import SecretError, SecretRef, declared, secret_file
from gitscale.files import FILE_SUFFIX


class CredentialRefused(SecretError):
    """A credential the API refused. ``str()`` is ``head`` + ``tail``: ``resolve`` inserts
    between them that the credential is the source's default, when gitscale.yaml does not
    write it (the message is then blamed on the ``source:`` line)."""

    def __init__(self, head: str, tail: str, ref: SecretRef) -> None:
        super().__init__(head + tail, ref)
        self.head = head
        self.tail = tail

    def with_default(self) -> str:
        """The message, saying that the credential is the default (not written)."""
        return f"{self.head}the default: the source names no token; {self.tail}"


def is_refusal(exc: ApiError) -> bool:
    """A 401, or a 403 that is no rate limit: the credential (or a permission of it) refused.
    A credential that could not be sent (``Unsendable``) is said as such, not as a refusal."""
    return exc.status in (401, 403) and not isinstance(exc, (RateLimited, Unsendable))


def read_again(ref: SecretRef) -> str:
    """Whether a refused credential was read again: a file's is, at once (``Rotating.refresh``,
    through the client's ``refused``), a variable's cannot change in a running process."""
    path = secret_file(ref)
    if path is None:
        return "an environment variable: not read again, a new value needs a restart"
    named = f"{ref.where}{FILE_SUFFIX}={path}; " if ref.kind == "env" else ""
    return f"{named}read again after the refusal: still refused"


def api_words(exc: ApiError, client: str) -> str:
    """The client's error without its name (``github (URL): ``): the URL says which API."""
    return str(exc).removeprefix(f"{client}: ")


def refusal(who: str, what: str, ref: SecretRef, exc: ApiError, client: str, check: str,
            *, article: str = "the ") -> CredentialRefused:
    """``{who} refused the {what} from {ref} (read again …): {METHOD URL answered N: …}; {check}``
    (``client``: the HTTP client's name, which its errors begin with)."""
    return CredentialRefused(f"{who} refused {article}{what} from {declared(ref)} (",
                             f"{read_again(ref)}): {api_words(exc, client)}; {check}", ref)
