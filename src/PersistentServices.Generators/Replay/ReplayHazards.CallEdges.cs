using System;
using System.Collections.Generic;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>The calls into source methods that the analysis follows, so the same rules run on the methods persistent code calls.</summary>
internal static partial class ReplayHazards
{
    private static void AddCallEdges(IOperation operation, ReplayAnalysis analysis, WriteScope scope, List<CallEdge> edges, CancellationToken cancellationToken)
    {
        switch (operation)
        {
            case IInvocationOperation invocation:
                var method = invocation.TargetMethod.ReducedFrom ?? invocation.TargetMethod;
                AddEdge(method, method.IsStatic ? null : invocation.Instance, analysis, scope, edges, cancellationToken);
                break;
            case IMethodReferenceOperation reference:
                AddEdge(reference.Method.ReducedFrom ?? reference.Method, reference.Method.IsStatic ? null : reference.Instance, analysis, scope, edges, cancellationToken);
                break;
            case IObjectCreationOperation { Constructor: { } constructor }:
                AddEdge(constructor, null, analysis, scope, edges, cancellationToken);
                break;
            case IPropertyReferenceOperation reference when !PersistentCode.IsStateProperty(reference.Property):
                var (get, set) = GetAccessorUse(reference);
                var instance = reference.Property.IsStatic ? null : reference.Instance;
                if (get && reference.Property.GetMethod is { } getter)
                {
                    AddEdge(getter, instance, analysis, scope, edges, cancellationToken);
                }

                if (set && reference.Property.SetMethod is { } setter)
                {
                    AddEdge(setter, instance, analysis, scope, edges, cancellationToken);
                }

                break;
        }
    }

    private static void AddEdge(IMethodSymbol method, IOperation? instance, ReplayAnalysis analysis, WriteScope scope, List<CallEdge> edges, CancellationToken cancellationToken)
    {
        method = method.OriginalDefinition;
        var isDispatch = method.IsAbstract || method.ContainingType?.TypeKind == TypeKind.Interface;
        if (!isDispatch && !analysis.Source.IsInSource(method))
        {
            return;
        }

        // The receiver: this, an object held in memory that outlives the request, or nothing that matters.
        var kind = ReceiverKind.None;
        StatePlace? holder = null;
        if (instance is not null)
        {
            if (Operations.IsThis(instance))
            {
                kind = ReceiverKind.This;
            }
            else if (FindPlace(instance, asReceiver: true, analysis, scope, cancellationToken) is { } place)
            {
                kind = place.Place.Outlives ? ReceiverKind.Holder : ReceiverKind.This;
                holder = place.Place.Outlives ? place.Place : null;
            }
        }

        if (!isDispatch)
        {
            edges.Add(new CallEdge(method, kind, holder));
            return;
        }

        // An interface or abstract member: follow the implementations registered for the receiver's type.
        var serviceTypes = new HashSet<INamedTypeSymbol>(SymbolEqualityComparer.Default);
        if (Operations.SkipConversions(instance)?.Type is INamedTypeSymbol receiverType)
        {
            serviceTypes.Add(receiverType.OriginalDefinition);
        }

        if (method.ContainingType is { } declaring)
        {
            serviceTypes.Add(declaring.OriginalDefinition);
        }

        var targets = new HashSet<IMethodSymbol>(SymbolEqualityComparer.Default);

        var registry = analysis.GetRegistry(cancellationToken);
        foreach (var serviceType in serviceTypes)
        {
            foreach (var implementation in registry.GetImplementations(serviceType))
            {
                if (FindImplementation(implementation, method) is { } target && analysis.Source.IsInSource(target) && targets.Add(target.OriginalDefinition))
                {
                    edges.Add(new CallEdge(target.OriginalDefinition, kind, holder));
                }
            }
        }
    }

    private static IMethodSymbol? FindImplementation(INamedTypeSymbol implementation, IMethodSymbol method)
    {
        if (method.ContainingType.TypeKind == TypeKind.Interface)
        {
            return implementation.FindImplementationForInterfaceMember(method) as IMethodSymbol;
        }

        for (var type = implementation; type is not null; type = type.BaseType)
        {
            foreach (var member in type.GetMembers(method.Name))
            {
                for (var overridden = (member as IMethodSymbol)?.OverriddenMethod; overridden is not null; overridden = overridden.OverriddenMethod)
                {
                    if (SymbolEqualityComparer.Default.Equals(overridden.OriginalDefinition, method))
                    {
                        return (IMethodSymbol)member;
                    }
                }
            }
        }

        return null;
    }

    /// <summary>Which accessors a property reference runs: the getter, the setter, or both (<c>++</c>, <c>+=</c>).</summary>
    private static (bool Get, bool Set) GetAccessorUse(IPropertyReferenceOperation reference)
    {
        IOperation current = reference;
        while (current.Parent is IConversionOperation or ITupleOperation)
        {
            current = current.Parent;
        }

        return current.Parent switch
        {
            ISimpleAssignmentOperation assignment when ReferenceEquals(assignment.Target, current) => (false, true),
            IDeconstructionAssignmentOperation assignment when ReferenceEquals(assignment.Target, current) => (false, true),
            ICompoundAssignmentOperation assignment when ReferenceEquals(assignment.Target, current) => (true, true),
            ICoalesceAssignmentOperation assignment when ReferenceEquals(assignment.Target, current) => (true, true),
            IIncrementOrDecrementOperation => (true, true),
            _ => (true, false),
        };
    }

    private sealed class PlaceResult
    {
        public PlaceResult(StatePlace place, string? member)
        {
            Place = place;
            Member = member;
        }

        public StatePlace Place { get; }

        public string? Member { get; }
    }
}
