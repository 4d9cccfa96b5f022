namespace PersistentServices;

/// <summary>
/// A subordinate component (Phoenix/App §3.2.1): an in-process class that only its parent persistent component (and the
/// parent's other subordinates) calls, within the parent's requests. Calls between them are ordinary method calls,
/// neither intercepted nor logged: they are determined by the parent's logged requests, and replay repeats them. Its
/// state is per parent session: <c>[SessionState]</c> properties. The analyzers treat its code as persistent code.
/// </summary>
[AttributeUsage(AttributeTargets.Class, AllowMultiple = false, Inherited = true)]
public sealed class SubordinateAttribute : Attribute
{
}
