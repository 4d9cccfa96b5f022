using System.Runtime.CompilerServices;
using Microsoft.AspNetCore.Http;

namespace PersistentServices.Http;

/// <summary>What an endpoint is to the persistence layer ([Phoenix/App §3.2–3.3]).</summary>
internal enum EndpointRole
{
    /// <summary>No attribute: untouched.</summary>
    Plain,

    /// <summary>[Persistent]: logged, exactly once, reply forced before it leaves.</summary>
    Persistent,

    /// <summary>[PersistentReadOnly] (or the obsolete [ReadOnly]): not logged, forces nothing, changes no session state.</summary>
    ReadOnly,

    /// <summary>[Functional]: stateless and pure; not logged, no last-call table (Phoenix/App §3.2.2).</summary>
    Functional,
}

/// <summary>The role of each endpoint, read once from its metadata.</summary>
internal static class EndpointRoles
{
    private static readonly ConditionalWeakTable<Endpoint, StrongBox<EndpointRole>> Roles = [];

    public static EndpointRole Of(Endpoint? endpoint)
    {
        if (endpoint is null)
        {
            return EndpointRole.Plain;
        }

        return Roles.GetValue(endpoint, static e =>
        {
            // The most specific attribute wins: action metadata comes after controller metadata, and an endpoint
            // convention's (.Persistent(), PersistentEndpointConventionBuilderExtensions) after the handler's attributes.
            for (var i = e.Metadata.Count - 1; i >= 0; i--)
            {
                switch (e.Metadata[i])
                {
                    case PersistentReadOnlyAttribute:
#pragma warning disable CS0618 // the obsolete name means the same role
                    case ReadOnlyAttribute:
#pragma warning restore CS0618
                        return new StrongBox<EndpointRole>(EndpointRole.ReadOnly);
                    case PersistentAttribute:
                        return new StrongBox<EndpointRole>(EndpointRole.Persistent);
                    case FunctionalAttribute:
                        return new StrongBox<EndpointRole>(EndpointRole.Functional);
                }
            }

            return new StrongBox<EndpointRole>(EndpointRole.Plain);
        }).Value;
    }
}
