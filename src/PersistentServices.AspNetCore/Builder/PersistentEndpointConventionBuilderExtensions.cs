using PersistentServices;

namespace Microsoft.AspNetCore.Builder;

/// <summary>
/// Endpoint conventions for the roles the attributes express, for minimal APIs and route groups, beside
/// <c>.RequireAuthorization()</c> and <c>.RequireRateLimiting()</c>: <c>app.MapPost("/cart/items", handler).Persistent()</c>.
/// Each adds the same metadata as its attribute, so an endpoint marked either way is treated the same.
/// </summary>
public static class PersistentEndpointConventionBuilderExtensions
{
    private static readonly PersistentAttribute PersistentMetadata = new();
    private static readonly PersistentReadOnlyAttribute ReadOnlyMetadata = new();
    private static readonly FunctionalAttribute FunctionalMetadata = new();
    private static readonly RequireIdempotencyKeyAttribute RequireIdempotencyKeyMetadata = new();

    /// <summary>
    /// Makes the endpoints persistent, as <see cref="PersistentAttribute"/> does: each client request runs exactly once
    /// through retries and crashes, and the session's state survives a crash.
    /// </summary>
    /// <typeparam name="TBuilder">The endpoint convention builder.</typeparam>
    /// <param name="builder">The endpoint or route group.</param>
    /// <returns>The builder, for chaining.</returns>
    public static TBuilder Persistent<TBuilder>(this TBuilder builder) where TBuilder : IEndpointConventionBuilder
        => builder.WithRole(PersistentMetadata);

    /// <summary>
    /// Makes the endpoints read-only, as <see cref="PersistentReadOnlyAttribute"/> does: not logged, forcing nothing,
    /// changing no session state; they may read the session's state when the request carries a session id.
    /// </summary>
    /// <typeparam name="TBuilder">The endpoint convention builder.</typeparam>
    /// <param name="builder">The endpoint or route group.</param>
    /// <returns>The builder, for chaining.</returns>
    public static TBuilder PersistentReadOnly<TBuilder>(this TBuilder builder) where TBuilder : IEndpointConventionBuilder
        => builder.WithRole(ReadOnlyMetadata);

    /// <summary>
    /// Makes the endpoints functional, as <see cref="FunctionalAttribute"/> does: stateless and pure, not logged, and
    /// their replies tell persistent callers they need not log or force for them.
    /// </summary>
    /// <typeparam name="TBuilder">The endpoint convention builder.</typeparam>
    /// <param name="builder">The endpoint or route group.</param>
    /// <returns>The builder, for chaining.</returns>
    public static TBuilder Functional<TBuilder>(this TBuilder builder) where TBuilder : IEndpointConventionBuilder
        => builder.WithRole(FunctionalMetadata);

    /// <summary>
    /// On persistent endpoints, requires the caller to deduplicate each request, as <see cref="RequireIdempotencyKeyAttribute"/>
    /// does: an <c>Idempotency-Key</c> header or a session's <c>PS-Session</c>/<c>PS-Seq</c>.
    /// </summary>
    /// <typeparam name="TBuilder">The endpoint convention builder.</typeparam>
    /// <param name="builder">The endpoint or route group.</param>
    /// <returns>The builder, for chaining.</returns>
    public static TBuilder RequireIdempotencyKey<TBuilder>(this TBuilder builder) where TBuilder : IEndpointConventionBuilder
        => builder.WithRole(RequireIdempotencyKeyMetadata);

    private static TBuilder WithRole<TBuilder>(this TBuilder builder, Attribute metadata) where TBuilder : IEndpointConventionBuilder
    {
        ArgumentNullException.ThrowIfNull(builder);
        builder.Add(endpoint => endpoint.Metadata.Add(metadata));
        return builder;
    }
}
