using System.Collections.Concurrent;
using PersistentServices.Log.Records;

namespace PersistentServices.Calls;

/// <summary>
/// The remote component role table (Phoenix/App §3.4): what each callee said it is, learned from the <c>PS-Role</c> of
/// its replies, per (callee, method, path) since one service may hold persistent, read-only and functional endpoints.
/// Unknown means the most conservative algorithm: persistent. Bounded; past the bound nothing more is learned.
/// </summary>
internal sealed class CallRoles
{
    public const string Persistent = "persistent";
    public const string Functional = "functional";
    public const string ReadOnly = "read-only";
    private const int Bound = 10_000;

    private readonly ConcurrentDictionary<(string Callee, string Method, string Path), CalleeRole> _roles = new();

    public CalleeRole Get(string callee, string method, string path)
        => _roles.TryGetValue((callee, method, path), out var role) ? role : CalleeRole.Unknown;

    public void Learn(string callee, string method, string path, CalleeRole role)
    {
        if (role == CalleeRole.Unknown)
        {
            _roles.TryRemove((callee, method, path), out _);
        }
        else if (_roles.Count < Bound || _roles.ContainsKey((callee, method, path)))
        {
            _roles[(callee, method, path)] = role;
        }
    }

    public static CalleeRole Parse(string? header) => header switch
    {
        Persistent => CalleeRole.Persistent,
        Functional => CalleeRole.Functional,
        ReadOnly => CalleeRole.ReadOnly,
        _ => CalleeRole.Unknown,
    };
}
