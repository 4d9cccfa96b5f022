namespace PersistentServices.Sessions;

/// <summary>
/// A request that names no session (no <c>PS-Session</c> header) ran an endpoint that reads session state: the client's
/// mistake, answered <c>400 session-required</c>, not the endpoint's failure.
/// </summary>
internal sealed class SessionRequiredException(string name) : InvalidOperationException(
    $"Session state '{name}' is only available while a request of a session runs: this request sent no PS-Session header.")
{
    public string StateName { get; } = name;
}
