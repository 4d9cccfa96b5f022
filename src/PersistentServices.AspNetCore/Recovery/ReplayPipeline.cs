using Microsoft.AspNetCore.Http;

namespace PersistentServices.Recovery;

/// <summary>
/// The part of the application pipeline after the persistence middleware, and a router, handed over by the middleware
/// when the pipeline is built so replay can run logged requests through the same endpoints, filters and binding.
/// </summary>
internal sealed class ReplayPipeline
{
    private readonly TaskCompletionSource<(Lazy<RequestDelegate> Router, RequestDelegate Next)> _pipeline = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public Task<(Lazy<RequestDelegate> Router, RequestDelegate Next)> Ready => _pipeline.Task;

    public bool IsBuilt => _pipeline.Task.IsCompleted;

    public void Register(Lazy<RequestDelegate> router, RequestDelegate next) => _pipeline.TrySetResult((router, next));
}
